//! Response scrubbing: every form in which a response could hand a secret's real value back
//! (see `Secret::reflections`) is replaced by the secret's placeholder, in header values and in
//! streamed bodies. A body is scrubbed chunk by chunk, holding back at most the longest form
//! less one byte, so a value split across chunks is caught and buffering stays bounded.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame};
use zeroize::Zeroizing;

use crate::secret::Secret;

/// The error type of the bodies the broker passes on.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Forms to find, each with the placeholder that replaces it.
#[derive(Clone, Default)]
pub struct Needles {
    forms: Vec<(Zeroizing<Vec<u8>>, Bytes, usize)>,
    longest: usize,
}

impl std::fmt::Debug for Needles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Needles")
            .field("forms", &self.forms.len())
            .finish_non_exhaustive()
    }
}

impl Needles {
    /// The reflections of `secrets` (identified by their index, for counting).
    pub fn new<'a>(secrets: impl IntoIterator<Item = (usize, &'a Secret)>) -> Needles {
        let mut n = Needles::default();
        for (i, s) in secrets {
            let placeholder = Bytes::copy_from_slice(s.placeholder().as_bytes());
            for form in s.reflections() {
                n.longest = n.longest.max(form.len());
                n.forms.push((form, placeholder.clone(), i));
            }
        }
        n
    }

    pub fn is_empty(&self) -> bool {
        self.forms.is_empty()
    }

    fn at(&self, hay: &[u8]) -> Option<&(Zeroizing<Vec<u8>>, Bytes, usize)> {
        self.forms.iter().find(|(f, _, _)| hay.starts_with(f))
    }

    fn could_start(&self, tail: &[u8]) -> bool {
        self.forms
            .iter()
            .any(|(f, _, _)| f.len() > tail.len() && f.starts_with(tail))
    }

    /// Scrubs a whole value (a header); the indexes of the secrets found are pushed to `hits`.
    pub fn scrub_all(&self, hay: &[u8], hits: &mut Vec<usize>) -> Option<Vec<u8>> {
        let mut s = Scrubber::new(self.clone());
        let mut out = s.push(hay, hits);
        out.extend_from_slice(&s.finish());
        (out != hay).then(|| out.to_vec())
    }

    /// Scrubs every header value, returning the secrets found.
    pub fn scrub_headers(&self, headers: &mut HeaderMap) -> Vec<usize> {
        let mut hits = Vec::new();
        if self.is_empty() {
            return hits;
        }
        for v in headers.values_mut() {
            if let Some(clean) = self.scrub_all(v.as_bytes(), &mut hits) {
                // The placeholder is header-safe and the rest is what the server sent.
                if let Ok(nv) = http::HeaderValue::from_bytes(&clean) {
                    *v = nv;
                } else {
                    *v = http::HeaderValue::from_static("");
                }
            }
        }
        hits
    }
}

/// The streaming state: the bytes held back from the last chunk.
#[derive(Debug)]
pub struct Scrubber {
    needles: Needles,
    carry: Zeroizing<Vec<u8>>,
}

impl Scrubber {
    pub fn new(needles: Needles) -> Scrubber {
        Scrubber {
            needles,
            carry: Zeroizing::new(Vec::new()),
        }
    }

    /// Scrubs the next chunk: returns what may be passed on now, holding back a tail that
    /// could still begin a form.
    pub fn push(&mut self, chunk: &[u8], hits: &mut Vec<usize>) -> BytesMut {
        let mut buf = Zeroizing::new(std::mem::take(&mut *self.carry));
        buf.extend_from_slice(chunk);
        let mut out = BytesMut::with_capacity(buf.len());
        let mut i = 0;
        while i < buf.len() {
            let rest = &buf[i..];
            if let Some((form, placeholder, who)) = self.needles.at(rest) {
                out.extend_from_slice(placeholder);
                hits.push(*who);
                i += form.len();
            } else if rest.len() < self.needles.longest && self.needles.could_start(rest) {
                self.carry.extend_from_slice(rest);
                break;
            } else {
                out.extend_from_slice(&rest[..1]);
                i += 1;
            }
        }
        out
    }

    /// The held-back tail at the end of the body (it matched no whole form).
    pub fn finish(&mut self) -> Bytes {
        Bytes::copy_from_slice(&std::mem::take(&mut *self.carry))
    }
}

/// Told the indexes of the secrets a body chunk held.
pub type OnHit = Box<dyn FnMut(&[usize]) + Send + Sync>;

/// A body passed through a [`Scrubber`]; trailers are scrubbed like headers. `on_hit` is told
/// each secret found.
pub struct ScrubBody<B> {
    inner: B,
    scrubber: Scrubber,
    /// Trailers waiting while the held-back tail goes out first.
    trailers: Option<HeaderMap>,
    done: bool,
    on_hit: OnHit,
}

impl<B> std::fmt::Debug for ScrubBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScrubBody").finish_non_exhaustive()
    }
}

impl<B> ScrubBody<B> {
    pub fn new(inner: B, needles: Needles, on_hit: OnHit) -> Self {
        ScrubBody {
            inner,
            scrubber: Scrubber::new(needles),
            trailers: None,
            done: false,
            on_hit,
        }
    }
}

impl<B> Body for ScrubBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            if let Some(t) = this.trailers.take() {
                this.done = true;
                return Poll::Ready(Some(Ok(Frame::trailers(t))));
            }
            if this.done {
                return Poll::Ready(None);
            }
            let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(None) => {
                    this.done = true;
                    let tail = this.scrubber.finish();
                    if tail.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(tail))));
                }
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            let mut hits = Vec::new();
            let out = match frame.into_data() {
                Ok(data) => {
                    let out = this.scrubber.push(&data, &mut hits);
                    (!out.is_empty()).then(|| Frame::data(out.freeze()))
                }
                Err(frame) => match frame.into_trailers() {
                    Ok(mut trailers) => {
                        hits = this.scrubber.needles.scrub_headers(&mut trailers);
                        this.trailers = Some(trailers);
                        let tail = this.scrubber.finish();
                        (!tail.is_empty()).then(|| Frame::data(tail))
                    }
                    Err(_) => None,
                },
            };
            if !hits.is_empty() {
                (this.on_hit)(&hits);
            }
            if let Some(f) = out {
                return Poll::Ready(Some(Ok(f)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::{Secret, SecretSpec};

    fn secret(value: &str) -> Secret {
        let spec: SecretSpec = serde_json::from_value(serde_json::json!({
            "name": "k", "value": value, "hosts": ["h.test"]
        }))
        .unwrap();
        Secret::new(spec).unwrap()
    }

    #[test]
    fn every_form_is_replaced_even_split_across_chunks_with_bounded_carry() {
        let s = secret("sk-REAL/value+1");
        let n = Needles::new([(0, &s)]);
        let text = "a sk-REAL/value+1 b c2stUkVBTC92YWx1ZSsx== c sk-REAL%2Fvalue%2B1 d sk-REAL%2fvalue%2b1 e sk-REAL";
        let p = s.placeholder();
        for split in 1..text.len() {
            let mut sc = Scrubber::new(n.clone());
            let mut hits = Vec::new();
            let mut out = Vec::new();
            for chunk in text.as_bytes().chunks(split) {
                out.extend_from_slice(&sc.push(chunk, &mut hits));
                assert!(sc.carry.len() < n.longest, "bounded carry");
            }
            out.extend_from_slice(&sc.finish());
            let out = String::from_utf8(out).unwrap();
            assert_eq!(
                out,
                format!("a {p} b {p}== c {p} d {p} e sk-REAL"),
                "chunks of {split}"
            );
            assert_eq!(hits.len(), 4);
        }
    }

    #[test]
    fn headers_are_scrubbed_in_place() {
        let s = secret("sk-REAL");
        let n = Needles::new([(7, &s)]);
        let mut h = HeaderMap::new();
        h.insert("x-echo", "Bearer sk-REAL".parse().unwrap());
        h.insert("x-other", "fine".parse().unwrap());
        assert_eq!(n.scrub_headers(&mut h), vec![7]);
        assert_eq!(h["x-echo"], format!("Bearer {}", s.placeholder()).as_str());
        assert_eq!(h["x-other"], "fine");
    }
}
