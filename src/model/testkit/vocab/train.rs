//! The training half of the tiny vocabularies: the embedded text, the word
//! splits (GPT-2-like for byte-level, "▁"-words for SentencePiece) and a plain
//! deterministic BPE training loop. Ties are broken by the pair's text, never
//! by hash order, so every run learns the same merges.

use std::collections::HashMap;

/// SentencePiece's visible space.
pub(super) const SPM_SPACE: char = '▁';

/// The text the tiny vocabularies are trained on.
pub const TRAINING_TEXT: &str = r#"The quick brown fox jumps over the lazy dog. The dog was not amused, and the fox ran into the forest.
It's a truth universally acknowledged that a model in possession of a good cache must be in want of a prompt.
We'll see what they've done; I'm sure they'd say we're fine. Don't worry, you'll be there and it's all right.
Hello, world! Hello again, world. Hello there, how are you today? I am well, thank you, and you?
The cache keeps every conversation warm: the prefix of each prompt lives in blocks on the device, then in host memory, then on disk.
When the device pool runs short, the least recently used blocks are moved to the host; when the host runs short, they are dropped.
Numbers: 12345, 12345, 12345, 2024, 2025, 100, 1000, 3.14159, 2.71828, 42, 7, 365 days, 24 hours, 60 minutes, 12345.
Prices were 1,000,000 and 250,000; the year 1999 came before 2000, and 12345 is just 12345.
fn main() {
    let mut total: u32 = 0;
    for i in 0..10 {
        total += i * 2;
    }
    println!("total = {}", total);
}
def forward(self, x, pos):
    return self.norm(self.layers(x, pos)) + x
for (int i = 0; i < n; i++) { sum += values[i]; }
if let Some(value) = map.get(&key) { return Ok(value.clone()); }
import numpy as np; x = np.zeros((3, 4), dtype=np.float32)
Le café est très bon, et la crème brûlée aussi. Où est la bibliothèque? À bientôt, mon ami, à la prochaine.
Die Größe der Straße ist schön. Über den Fluß, durch den Wald, zum Märchenschloß. Schöne Grüße aus München.
El niño está en la montaña; mañana será otro día. ¿Qué tal? ¡Muy bien, gracias! La canción es bonita.
日本語のテキストです。東京は日本の首都です。日本語と中文を少し書きます。
中文字符也在这里。我们在北京学习中文。北京是中国的首都。中文很有意思。
한국어 문장도 조금 있습니다. 서울은 한국의 수도입니다.
Emoji appear once: 🎉 and 🚀 and ✨, but hearts ❤️ ❤️ ❤️ appear thrice.
Tabs	and	spaces    and     runs of spaces, then blank lines.


The end of the text is here, and the model will stop when it sees the end of turn.
The the the and and and of of of to to to in in in is is is it it it that that that.
The model reads the prompt, the model writes the answer, and the user reads the answer of the model.
"#;

/// Words (as symbol sequences) with their counts, in a deterministic order.
pub(super) type Words = Vec<(Vec<String>, usize)>;

pub(super) fn count_words(words: impl IntoIterator<Item = Vec<String>>) -> Words {
    let mut counts: HashMap<Vec<String>, usize> = HashMap::new();
    for w in words {
        *counts.entry(w).or_default() += 1;
    }
    let mut out: Words = counts.into_iter().collect();
    out.sort();
    out
}

/// Plain BPE training: repeatedly merge the most frequent adjacent pair
/// (ties: the lexicographically smallest) until `n_merges` or no pair occurs
/// twice. Pairs where `mergeable` rejects a symbol are never counted.
pub(super) fn train_bpe(mut words: Words, n_merges: usize, mergeable: impl Fn(&str) -> bool) -> Vec<(String, String)> {
    let mut merges = Vec::new();
    while merges.len() < n_merges {
        let mut pairs: HashMap<(&str, &str), usize> = HashMap::new();
        for (symbols, n) in &words {
            for w in symbols.windows(2) {
                if mergeable(&w[0]) && mergeable(&w[1]) {
                    *pairs.entry((w[0].as_str(), w[1].as_str())).or_default() += n;
                }
            }
        }
        let best = pairs
            .into_iter()
            .filter(|&(_, n)| n >= 2)
            .max_by(|(pa, na), (pb, nb)| na.cmp(nb).then_with(|| pb.cmp(pa)))
            .map(|((a, b), _)| (a.to_string(), b.to_string()));
        let Some((a, b)) = best else { break };
        let merged = format!("{a}{b}");
        for (symbols, _) in &mut words {
            let mut i = 0;
            while i + 1 < symbols.len() {
                if symbols[i] == a && symbols[i + 1] == b {
                    symbols[i] = merged.clone();
                    symbols.remove(i + 1);
                }
                i += 1;
            }
        }
        merges.push((a, b));
    }
    merges
}

/// GPT-2's byte → printable character table (`bytes_to_unicode`), in GPT-2's
/// vocabulary order: printable bytes first, then the rest mapped above U+0100.
pub(super) fn byte_chars() -> Vec<(u8, char)> {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    let mut out: Vec<(u8, char)> = (0..=255u8)
        .filter(|&b| printable(b))
        .map(|b| (b, char::from(b)))
        .collect();
    for (code, b) in (256u32..).zip((0..=255u8).filter(|&b| !printable(b))) {
        out.push((b, char::from_u32(code).unwrap_or('?')));
    }
    out
}

pub(super) fn to_byte_level(text: &str, table: &[char; 256]) -> String {
    text.bytes().map(|b| table[b as usize]).collect()
}

/// A rough GPT-2 split (contractions, ` ?letters`, ` ?digits`, ` ?other`,
/// whitespace runs); only used to find training words.
pub(super) fn gpt2_words(text: &str) -> Vec<String> {
    #[derive(PartialEq)]
    enum Class {
        Letter,
        Digit,
        Other,
    }
    let class = |c: char| {
        if c.is_alphabetic() {
            Class::Letter
        } else if c.is_numeric() {
            Class::Digit
        } else {
            Class::Other
        }
    };
    let chars: Vec<char> = text.chars().collect();
    let mut words = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let start = i;
        if chars[i] == '\'' {
            let rest: String = chars[i + 1..].iter().take(2).collect();
            if let Some(c) = ["re", "ve", "ll", "s", "t", "m", "d"]
                .iter()
                .find(|c| rest.starts_with(**c))
            {
                i += 1 + c.len();
                words.push(chars[start..i].iter().collect());
                continue;
            }
        }
        let spaced = chars[i] == ' ' && chars.get(i + 1).is_some_and(|c| !c.is_whitespace());
        if chars[i].is_whitespace() && !spaced {
            while i < chars.len() && chars[i].is_whitespace() {
                i += 1;
            }
            if i < chars.len() && i - start > 1 && chars[i - 1] == ' ' {
                i -= 1;
            }
        } else {
            if spaced {
                i += 1;
            }
            let cls = class(chars[i]);
            while i < chars.len() && !chars[i].is_whitespace() && class(chars[i]) == cls {
                i += 1;
            }
        }
        words.push(chars[start..i].iter().collect());
    }
    words
}

/// SentencePiece-style training words: "▁" for every space and one in front
/// of each line, each word starting at a "▁"; and the alphabet, the characters
/// seen at least `min_count` times (control characters such as tabs and
/// newlines never), most frequent first. Rarer characters are left to byte fallback.
pub(super) fn spm_words(text: &str, min_count: usize) -> (Words, Vec<char>) {
    let mut char_counts: HashMap<char, usize> = HashMap::new();
    let mut words: Vec<Vec<String>> = Vec::new();
    for line in text.lines() {
        let normalized = std::iter::once(SPM_SPACE).chain(line.chars().map(|c| if c == ' ' { SPM_SPACE } else { c }));
        let mut word: Vec<String> = Vec::new();
        for c in normalized {
            *char_counts.entry(c).or_default() += 1;
            if c == SPM_SPACE && !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            word.push(c.to_string());
        }
        words.push(word);
    }
    let mut alphabet: Vec<(char, usize)> = char_counts
        .into_iter()
        .filter(|&(c, n)| n >= min_count && !c.is_control())
        .collect();
    alphabet.sort_by(|(ca, na), (cb, nb)| nb.cmp(na).then(ca.cmp(cb)));
    (count_words(words), alphabet.into_iter().map(|(c, _)| c).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_words_follow_gpt2_shapes() {
        assert_eq!(
            gpt2_words("I'm here  now\n\nok 123"),
            ["I", "'m", " here", " ", " now", "\n\n", "ok", " 123"]
        );
    }

    #[test]
    fn bpe_training_is_deterministic_and_greedy() {
        let words = count_words(
            ["ab", "ab", "abc", "bc"]
                .iter()
                .map(|w| w.chars().map(String::from).collect()),
        );
        let merges = train_bpe(words.clone(), 10, |_| true);
        assert_eq!(merges, train_bpe(words, 10, |_| true));
        assert_eq!(
            merges[0],
            ("a".to_string(), "b".to_string()),
            "three 'ab' beat two 'bc'"
        );
    }

    #[test]
    fn spm_words_start_at_the_space_mark() {
        let (words, alphabet) = spm_words("a b a b\ta", 2);
        let texts: Vec<String> = words.iter().map(|(w, _)| w.concat()).collect();
        assert_eq!(texts, ["▁a", "▁b", "▁b\ta"]);
        assert_eq!(alphabet, ['▁', 'a', 'b']);
    }
}
