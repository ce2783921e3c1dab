//! Our logits against llama.cpp's recorded top log-probabilities, position by position: the
//! comparison `tests/real_llama_cpp.rs` and `tests/tiny_llama_cpp.rs` share.

use hearth::bench::log_softmax;

/// Our greedy pick from `row`.
pub fn pick(row: &[f32]) -> usize {
    (0..row.len()).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap()
}

/// What the positions compared so far showed.
#[derive(Default)]
pub struct AgainstLlama {
    /// The largest difference of a log-probability from llama.cpp's, and where.
    pub worst: (f64, String),
    /// Positions where we took the other side of a near-tie.
    pub ties: Vec<String>,
    /// Log-probabilities compared.
    pub compared: usize,
    /// The sum of their differences from llama.cpp's (over `compared`: the mean).
    pub total: f64,
}

impl AgainstLlama {
    /// The mean difference of the log-probabilities compared.
    pub fn mean(&self) -> f64 {
        self.total / self.compared.max(1) as f64
    }

    /// One position (`at`, e.g. "prompt 2 token 5"; `context` names the model and run in
    /// messages): our log-probabilities of llama.cpp's `top` tokens (id, log p) above
    /// `compared_above` are compared; our greedy pick must be llama.cpp's top token, or, where
    /// its top two are within `near_tie`, the other of that pair (kept in `ties`).
    pub fn position(&mut self, context: &str, at: &str, row: &[f32], top: &[(usize, f64)], compared_above: f64, near_tie: f64) {
        let ours = log_softmax(row);
        for &(id, lp) in top.iter().filter(|t| t.1 > compared_above) {
            self.compared += 1;
            let d = (ours[id] - lp).abs();
            self.total += d;
            if d > self.worst.0 {
                self.worst = (d, format!("{context} {at}: log p({id}) {:.3} vs llama.cpp {lp:.3}", ours[id]));
            }
        }
        let pick = pick(row);
        if pick != top[0].0 {
            let gap = top.iter().find(|t| t.0 == pick).map(|t| top[0].1 - t.1);
            assert!(
                gap.is_some_and(|g| g < near_tie),
                "{context} {at}: we pick {pick}, llama.cpp {} (its top three {:?})",
                top[0].0,
                &top[..3]
            );
            self.ties.push(format!("{at} (gap {:.3})", gap.unwrap_or(f64::NAN)));
        }
    }

    /// A position where llama.cpp gave its greedy token (`theirs`) but no log-probabilities
    /// (llama-server withholds them after a token that ends mid UTF-8 sequence): our pick must
    /// be `theirs` or, where our own log-probabilities of the two are within `near_tie`, ours
    /// (kept in `ties`, marked as judged by ours).
    pub fn unscored(&mut self, context: &str, at: &str, row: &[f32], theirs: usize, near_tie: f64) {
        let pick = pick(row);
        if pick != theirs {
            let ours = log_softmax(row);
            let gap = ours[pick] - ours[theirs];
            assert!(
                gap < near_tie,
                "{context} {at}: we pick {pick}, llama.cpp {theirs} (our log-probabilities {:.3} and {:.3})",
                ours[pick],
                ours[theirs]
            );
            self.ties.push(format!("{at} (gap {gap:.3}, ours; llama.cpp gave none)"));
        }
    }

    /// The near-ties taken the other way, for the report.
    pub fn ties_line(&self) -> String {
        if self.ties.is_empty() {
            "none".to_string()
        } else {
            self.ties.join(", ")
        }
    }
}
