//! A guest init step that failed: what the host is told (`Tell::Failed`) and the console prints.

/// A step that failed, as the host is told it.
#[derive(Debug)]
pub struct Failed {
    pub step: String,
    pub error: String,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.error)
    }
}

/// `Err` of a step, named.
pub fn at<E: std::fmt::Display>(step: &str) -> impl FnOnce(E) -> Failed + '_ {
    move |e| Failed {
        step: step.to_owned(),
        error: e.to_string(),
    }
}
