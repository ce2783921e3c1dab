//! Stop strings: ending a reply at the first occurrence of any of them,
//! without ever streaming a character of the stop string itself.
//!
//! Owns: [`StopMatcher`]. Text arrives piece by piece; a tail that could be
//! the start of a stop string is held back until the next piece decides it.
//!
//! Counterpart: vLLM's `StopChecker` (`check_stop_strings`), llama.cpp
//! server's partial stop matching.

/// Watches a reply's text for stop strings.
#[derive(Debug, Clone, Default)]
pub(crate) struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not yet released: a possible start of a stop string.
    held: String,
    stopped: bool,
    /// The stop string found (the first in the text; of two starting there, the first listed).
    matched: Option<String>,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored; the engine refuses
    /// them at submission).
    pub(crate) fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
            stopped: false,
            matched: None,
        }
    }

    /// Whether a stop string was found.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped
    }

    /// The stop string that ended the text, once one did.
    pub(crate) fn matched(&self) -> Option<&str> {
        self.matched.as_deref()
    }

    /// Adds `piece`; returns the text that is now safe to release. After a
    /// stop string is found, that is the text before it and nothing more is
    /// ever released.
    pub(crate) fn push(&mut self, piece: &str) -> String {
        if self.stopped {
            return String::new();
        }
        if self.stops.is_empty() {
            return piece.to_string();
        }
        self.held.push_str(piece);
        let found = self.stops.iter().filter_map(|s| Some((self.held.find(s.as_str())?, s))).min_by_key(|(at, _)| *at);
        if let Some((at, stop)) = found {
            self.matched = Some(stop.clone());
            self.stopped = true;
            self.held.truncate(at);
            return std::mem::take(&mut self.held);
        }
        let keep = self.longest_stop_prefix_suffix();
        let release = self.held.len() - keep;
        let rest = self.held.split_off(release);
        std::mem::replace(&mut self.held, rest)
    }

    /// Ends the text: whatever is held back (nothing after a stop).
    pub(crate) fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Bytes at the end of `held` that are a proper prefix of some stop string.
    fn longest_stop_prefix_suffix(&self) -> usize {
        let h = &self.held;
        (1..h.len().min(self.stops.iter().map(String::len).max().unwrap_or(0)) + 1)
            .rev()
            .find(|&k| {
                let start = h.len() - k;
                h.is_char_boundary(start) && self.stops.iter().any(|s| s.len() > k && s.starts_with(&h[start..]))
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut out: Vec<String> = pieces.iter().map(|p| m.push(p)).collect();
        out.push(m.finish());
        let text = out.concat();
        (out, text, m.stopped())
    }

    #[test]
    fn no_stops_passes_everything_through() {
        let (out, text, stopped) = run(&[], &["a", "b"]);
        assert_eq!(out, vec!["a", "b", ""]);
        assert_eq!(text, "ab");
        assert!(!stopped);
    }

    #[test]
    fn the_stop_found_first_in_the_text_is_the_one_matched() {
        let stops = vec!["yz".to_string(), "b".to_string()];
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.matched(), None);
        assert_eq!(m.push("xab yz"), "xa");
        assert_eq!(m.matched(), Some("b"));
    }

    #[test]
    fn a_stop_across_pieces_is_never_released() {
        let (out, text, stopped) = run(&["END"], &["hello E", "N", "D and more"]);
        assert_eq!(out, vec!["hello ", "", "", ""]);
        assert_eq!(text, "hello ");
        assert!(stopped);
    }

    #[test]
    fn a_false_start_is_released_when_decided() {
        let (out, text, stopped) = run(&["END"], &["x E", "Nx", "y"]);
        assert_eq!(out, vec!["x ", "ENx", "y", ""]);
        assert_eq!(text, "x ENxy");
        assert!(!stopped);
    }

    #[test]
    fn the_earliest_of_several_stops_wins_and_held_text_is_flushed_at_the_end() {
        let (_, text, stopped) = run(&["\n\n", "B"], &["aB\n\nc"]);
        assert_eq!((text.as_str(), stopped), ("a", true));
        let (out, text, stopped) = run(&["Zz"], &["abc Z"]);
        assert_eq!(out, vec!["abc ", "Z"]);
        assert_eq!((text.as_str(), stopped), ("abc Z", false));
    }

    #[test]
    fn multibyte_text_splits_on_character_boundaries() {
        let (out, text, stopped) = run(&["é!"], &["café", "é", "!x"]);
        assert_eq!(out, vec!["caf", "é", "", ""]);
        assert_eq!(text, "café");
        assert!(stopped);
    }
}
