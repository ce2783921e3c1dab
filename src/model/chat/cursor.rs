//! A cursor over call text written in a model's own notation: what the readers of Gemma 4's
//! (`gemma4.rs`) and LFM2's (`lfm2.rs`) calls share. Each reader keeps the text still to read
//! and implements [`Cursor::rest`]; the moves (skip space, take a token, take a word, read a
//! bracketed, comma-separated sequence) are written once here.
//!
//! Invariant: a move that fails leaves nothing a caller relies on; the readers give up on the
//! whole call (`None`) at the first failure, so a half-read call is never taken.
//!
//! Counterpart: the small recursive-descent helpers in llama.cpp's `common/peg-parser`.

/// Provided moves over the text a reader has yet to read.
pub(super) trait Cursor<'a> {
    /// The text still to read.
    fn rest(&mut self) -> &mut &'a str;

    fn skip_space(&mut self) {
        let s = self.rest();
        *s = s.trim_start();
    }

    /// `token`, after any space: taken and `true` where it comes next.
    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        let s = self.rest();
        match s.strip_prefix(token) {
            Some(after) => {
                *s = after;
                true
            }
            None => false,
        }
    }

    /// The longest non-empty run of characters `ok` accepts.
    fn word(&mut self, ok: impl Fn(char) -> bool) -> Option<&'a str> {
        let s = self.rest();
        let end = s.find(|c: char| !ok(c)).unwrap_or(s.len());
        let (word, after) = s.split_at(end);
        *s = after;
        (!word.is_empty()).then_some(word)
    }

    /// `open item, item, … close`, empty allowed, each `item` read by `item`; `None` where an
    /// item fails or neither `,` nor `close` follows one.
    fn sequence<T>(&mut self, open: &str, close: &str, mut item: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>>
    where
        Self: Sized,
    {
        if !self.eat(open) {
            return None;
        }
        let mut out = Vec::new();
        if self.eat(close) {
            return Some(out);
        }
        loop {
            out.push(item(self)?);
            if self.eat(close) {
                return Some(out);
            }
            if !self.eat(",") {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cursor;

    struct Words<'a>(&'a str);

    impl<'a> Cursor<'a> for Words<'a> {
        fn rest(&mut self) -> &mut &'a str {
            &mut self.0
        }
    }

    fn words<'a>(c: &mut Words<'a>) -> Option<Vec<&'a str>> {
        c.sequence("[", "]", |c| {
            c.skip_space();
            c.word(char::is_alphanumeric)
        })
    }

    /// A sequence reads its items with space anywhere between them, and stops where it ends.
    #[test]
    fn a_sequence_reads_its_items_and_stops_after_its_close() {
        let mut c = Words(" [ a , bc,d ] tail");
        assert_eq!(words(&mut c), Some(vec!["a", "bc", "d"]));
        assert_eq!(c.0, " tail");
        let mut c = Words("[]");
        assert_eq!(words(&mut c), Some(vec![]));
        assert_eq!(c.0, "");
    }

    /// A missing item, a trailing comma, a missing close or open is no sequence.
    #[test]
    fn a_malformed_sequence_is_none() {
        for bad in ["[a,]", "[a b]", "[a", "a]", "[,a]", "[a,,b]"] {
            assert_eq!(words(&mut Words(bad)), None, "{bad:?}");
        }
    }
}
