//! `hull pull`: fetch an image from a registry into the local store, with a progress bar per
//! layer on a terminal and one line per layer otherwise.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Mutex;

use clap::Args;
use hull_box::size::Human;
use hull_image::oci::{Digest, Platform};
use hull_image::pull::{LayerOutcome, PullOptions, PullProgress};
use hull_image::{default_home, ClientOptions, Store};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Args, Debug)]
pub struct PullArgs {
    /// The image: [HOST[:PORT]/]REPO[:TAG][@sha256:HEX]. Without a host it is Docker Hub's
    /// (`busybox` is docker.io/library/busybox:latest). With a digest, the manifest must hash to it.
    pub image: String,
    /// Store it under this name (default: IMAGE as written, `:latest` added without a tag).
    #[arg(long)]
    pub name: Option<String>,
    /// Speak plain http to this registry (HOST or HOST:PORT; repeatable). Loopback registries
    /// (127.0.0.0/8, ::1, localhost) always use http; every other host uses verified https unless named here.
    #[arg(long = "insecure-registry", value_name = "HOST")]
    pub insecure_registry: Vec<String>,
    /// The platform to pick from a multi-platform image, as OS/ARCH[/VARIANT] (default: this host's).
    #[arg(long)]
    pub platform: Option<String>,
    /// How long to wait to connect, and for each read, before giving up (e.g. 30s, 5s).
    #[arg(long, default_value = "30s")]
    pub timeout: String,
    /// Layers downloaded at once.
    #[arg(long, default_value_t = 3)]
    pub parallel: usize,
}

/// Bars on a terminal; otherwise one line per finished layer on stderr.
struct Progress {
    /// `-q`: no progress lines.
    quiet: bool,
    multi: Option<MultiProgress>,
    bars: Mutex<HashMap<Digest, ProgressBar>>,
}

fn short(d: &Digest) -> &str {
    &d.hex()[..12]
}

impl PullProgress for Progress {
    fn resolved(&self, manifest: &Digest, layers: usize) {
        self.line(format!(
            "manifest sha256:{} ({layers} layers)",
            short(manifest)
        ));
    }

    fn layer_start(&self, layer: &Digest, size: u64, resumed_from: u64) {
        if let Some(m) = &self.multi {
            let bar = m.add(ProgressBar::new(size));
            let style = ProgressStyle::with_template(
                "{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(format!("layer {}", short(layer)));
            bar.set_position(resumed_from);
            self.bars
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(layer.clone(), bar);
        } else if resumed_from > 0 && !self.quiet {
            eprintln!(
                "layer {}: resuming at {} of {}",
                short(layer),
                Human(resumed_from),
                Human(size)
            );
        }
    }

    fn layer_bytes(&self, layer: &Digest, n: u64) {
        if let Some(b) = self
            .bars
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(layer)
        {
            b.inc(n);
        }
    }

    fn layer_done(&self, layer: &Digest, outcome: LayerOutcome) {
        let text = match outcome {
            LayerOutcome::Downloaded { bytes } => {
                format!("layer {}: downloaded {}", short(layer), Human(bytes))
            }
            LayerOutcome::AlreadyHere => format!("layer {}: already here", short(layer)),
        };
        match self
            .bars
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(layer)
        {
            Some(b) => b.finish_with_message(text),
            None => self.line(text),
        }
    }
}

impl Progress {
    fn line(&self, text: String) {
        match &self.multi {
            Some(m) => {
                let _ = m.println(text);
            }
            None if self.quiet => {}
            None => eprintln!("{text}"),
        }
    }
}

fn options(args: &PullArgs) -> Result<PullOptions, String> {
    for h in &args.insecure_registry {
        hull_image::reference::check_insecure_arg(h)?;
    }
    let platform = args.platform.as_deref().map(Platform::parse).transpose()?;
    let timeout =
        hull_api::duration::parse_duration(&args.timeout).map_err(|e| format!("--timeout: {e}"))?;
    if args.parallel == 0 || args.parallel > 8 {
        return Err(format!("--parallel {}: give 1 to 8", args.parallel));
    }
    Ok(PullOptions {
        client: ClientOptions {
            insecure: args.insecure_registry.clone(),
            connect_timeout: timeout,
            read_timeout: timeout,
        },
        platform,
        parallel: args.parallel,
        ..PullOptions::default()
    })
}

pub fn main(args: &PullArgs) -> i32 {
    let opts = match options(args) {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("hull: error: {msg}");
            return 125;
        }
    };
    let store = match Store::open(&default_home()) {
        Ok(s) => s,
        Err(e) => {
            crate::print_error(&e);
            return 125;
        }
    };
    let quiet = !crate::verbosity::enabled(crate::verbosity::Level::Warn);
    let multi = (std::io::stderr().is_terminal() && !quiet)
        .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
    let progress = Progress {
        quiet,
        multi,
        bars: Mutex::new(HashMap::new()),
    };
    match store.pull(&args.image, args.name.as_deref(), &opts, &progress) {
        Ok(r) if r.unchanged => {
            println!(
                "{} is up to date ({}); nothing downloaded",
                r.image.name, r.image.digest
            );
            0
        }
        Ok(r) => {
            println!(
                "pulled {} {} ({}): {} layer(s) downloaded ({}), {} already here",
                r.image.name,
                r.image.digest,
                Human(r.image.size),
                r.blobs_downloaded,
                Human(r.bytes_downloaded),
                r.blobs_present
            );
            0
        }
        Err(e) => {
            if let Some(m) = &progress.multi {
                let _ = m.clear();
            }
            crate::print_error(&e);
            1
        }
    }
}
