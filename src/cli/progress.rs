//! Progress on stderr: spinners for work of unknown length, byte bars for
//! downloads, hashing and verifying. Every command's progress is drawn here.

use hearth::engine::{DownloadProgress, LaunchProgress, LaunchStage, LoadMeter};

/// A hub download's progress as a bar on stderr (Ctrl-C stops it; the next run resumes),
/// and [`hearth::engine::launch`]'s later stages as spinners.
#[derive(Default)]
pub struct BarProgress(pub Option<indicatif::ProgressBar>);

impl LaunchProgress for BarProgress {
    fn stage(&mut self, stage: &LaunchStage) {
        if let Some(pb) = self.0.take() {
            pb.finish_and_clear();
        }
        let msg = match stage {
            LaunchStage::Loading(path) => format!("loading {}", path.display()),
            LaunchStage::IndexingDisk => "indexing saved conversations".to_owned(),
        };
        self.0 = Some(spinner(msg));
    }

    /// The loading spinner becomes a bar of the bytes read.
    fn load_meter(&mut self, total: u64) -> Option<LoadMeter> {
        let msg = self.0.take().map(|pb| {
            pb.finish_and_clear();
            pb.message()
        });
        let pb = bytes_bar(total, &msg.unwrap_or_else(|| "loading the model".to_owned()));
        self.0 = Some(pb.clone());
        Some(Box::new(move |done| pb.set_position(done.min(total))))
    }
}

impl Drop for BarProgress {
    /// A spinner is cleared; a download bar still up (the download failed) stays on screen.
    fn drop(&mut self) {
        match self.0.take() {
            Some(pb) if pb.length().is_some() => pb.abandon(),
            Some(pb) => pb.finish_and_clear(),
            None => {}
        }
    }
}

impl DownloadProgress for BarProgress {
    fn start(&mut self, file: &str, done: u64, total: u64) {
        let pb = bytes_bar(total, &format!("downloading {file}"));
        pb.set_position(done);
        self.0 = Some(pb);
    }

    fn advance(&mut self, done: u64) {
        if let Some(pb) = &self.0 {
            pb.set_position(done);
        }
    }

    fn finish(&mut self) {
        if let Some(pb) = self.0.take() {
            pb.finish_and_clear();
        }
    }
}

/// Runs `work` with a spinner showing `msg` on stderr.
pub fn with_spinner<T>(msg: String, work: impl FnOnce() -> T) -> T {
    let pb = spinner(msg);
    let out = work();
    pb.finish_and_clear();
    out
}

/// A bar counting `total` bytes, labelled `msg`.
pub fn bytes_bar(total: u64, msg: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(total);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(msg.to_string());
    pb
}

fn spinner(msg: String) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new_spinner();
    pb.set_message(msg);
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}
