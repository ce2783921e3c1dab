use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;

use super::*;
use crate::model::testkit::{TinyVocab, UnigramFixture, VocabStyle};
use crate::model::tokenizer::Tokenizer;

fn metadata() -> HashMap<String, Value> {
    TinyVocab::new(VocabStyle::Unigram).metadata_map()
}

fn tokenizer(md: &HashMap<String, Value>) -> Tokenizer {
    Tokenizer::from_gguf_metadata(md).unwrap()
}

#[test]
fn ids_are_sentencepieces() {
    let tok = tokenizer(&metadata());
    let fixture = UnigramFixture::load();
    assert!(fixture.texts.len() > 10);
    for t in &fixture.texts {
        let want: Vec<u32> = t
            .sentencepiece_ids
            .iter()
            .map(|&id| UnigramFixture::gguf_id(id))
            .collect();
        assert_eq!(tok.encode(&t.text, false).unwrap(), want, "{:?}", t.text);
    }
}

#[test]
fn embedding_input_is_bos_text_eos_and_special_texts_are_tokens() {
    let tok = tokenizer(&metadata());
    assert!(!tok.add_bos() || tok.bos_id() == Some(0));
    let plain = tok.encode("the cat", false).unwrap();
    let mut want = vec![0];
    want.extend(&plain);
    want.push(2);
    assert_eq!(tok.encode_for_embedding("the cat").unwrap(), want);
    // `<s>` and `</s>` in the text are their tokens; the text between is tokenized alone.
    let ids = tok.encode("<s>the cat</s>the cat", false).unwrap();
    let mut want = vec![0];
    want.extend(&plain);
    want.push(2);
    want.extend(&plain);
    assert_eq!(ids, want);
}

/// The partition strips as llama.cpp's: `<mask>` takes the spaces before it in a
/// `nomic-bert-moe` file; under a Phi-3 name `</s>` takes those after it and `<s>` does not;
/// only C's `isspace` is stripped. (Runs of spaces kept, `remove_extra_whitespaces` off, so
/// that the strips show.)
#[test]
fn special_tokens_take_whitespace_as_llama_cpp_says() {
    let keep_spaces = |vocab: TinyVocab| {
        let mut md = vocab.metadata_map();
        md.insert(metadata::REMOVE_EXTRA_WHITESPACES.into(), Value::Bool(false));
        md
    };
    let with = |vocab: TinyVocab, key: &str, value: &str| {
        let mut md = keep_spaces(vocab);
        md.insert(key.into(), Value::String(value.into()));
        tokenizer(&md)
    };
    let plain = tokenizer(&keep_spaces(TinyVocab::new(VocabStyle::Unigram)));
    let cat = plain.encode("the cat", false).unwrap();
    let cat_space = plain.encode("the cat  ", false).unwrap();
    assert_ne!(cat, cat_space);

    let masked = TinyVocab::new(VocabStyle::Unigram).with_mask();
    let moe = with(masked.clone(), "general.architecture", "nomic-bert-moe");
    let mask = moe.token_to_id("<mask>").unwrap();
    assert_eq!(moe.encode("the cat \t\n<mask>", false).unwrap(), [&cat[..], &[mask]].concat());
    let bert = with(masked, "general.architecture", "bert");
    assert_eq!(bert.encode("the cat  <mask>", false).unwrap(), [&cat_space[..], &[mask]].concat());

    let phi = with(TinyVocab::new(VocabStyle::Unigram), "general.name", "Phi-3 (a test)");
    let (s, end) = (phi.token_to_id("<s>").unwrap(), phi.token_to_id("</s>").unwrap());
    assert_eq!(phi.encode("</s> \n\rthe cat", false).unwrap(), [&[end][..], &cat].concat());
    let kept = plain.encode(" the cat", false).unwrap();
    assert_eq!(phi.encode("<s> the cat", false).unwrap(), [&[s][..], &kept].concat());
    let nbsp = plain.encode("\u{a0}the cat", false).unwrap();
    assert_eq!(phi.encode("</s>\u{a0}the cat", false).unwrap(), [&[end][..], &nbsp].concat());
}

#[test]
fn decoding_gives_the_normalized_text_back() {
    let tok = tokenizer(&metadata());
    for text in [
        "the cat sat on the mat",
        "Hello, world!",
        "Ｈｅｌｌｏ  ｗｏｒｌｄ",
        "ﬁne…",
    ] {
        let ids = tok.encode(text, false).unwrap();
        let back = tok.decode(&ids).unwrap();
        let want = text
            .replace("Ｈｅｌｌｏ  ｗｏｒｌｄ", "Hello world")
            .replace('ﬁ', "fi")
            .replace('…', "...");
        assert_eq!(back, want, "{text:?}");
    }
}

#[test]
fn unknown_characters_are_one_unknown_token_per_run() {
    let tok = tokenizer(&metadata());
    let ids = tok.encode("ÆØÅ", false).unwrap();
    assert_eq!(ids.iter().filter(|&&id| id == 3).count(), 1, "{ids:?}");
}

#[test]
fn user_defined_pieces_pass_unnormalized_and_score_zero() {
    let mut md = metadata();
    let Some(Value::Array(tokens)) = md.get_mut(metadata::TOKENS) else {
        panic!()
    };
    // A fifth special-looking piece, made user-defined: its full-width letters would
    // otherwise be normalized to ASCII.
    let last = tokens.len() - 1;
    tokens[last] = Value::String("ＡＢ".into());
    let Some(Value::Array(types)) = md.get_mut(metadata::TOKEN_TYPE) else {
        panic!()
    };
    types[last] = Value::I32(4);
    let tok = tokenizer(&md);
    let ids = tok.encode("xＡＢx", false).unwrap();
    assert!(ids.contains(&(last as u32)), "{ids:?}");
    // Without it, the letters are normalized and no id is that token.
    let plain = tokenizer(&metadata()).encode("xＡＢx", false).unwrap();
    assert!(!plain.contains(&(last as u32)), "{plain:?}");
}

#[test]
fn without_a_charsmap_text_is_only_escaped() {
    let mut md = metadata();
    md.remove(metadata::PRECOMPILED_CHARSMAP);
    let tok = tokenizer(&md);
    // Full-width letters are no longer ASCII: nothing but unknown tokens and spaces for them.
    let ids = tok.encode("ＡＢＣ", false).unwrap();
    assert!(
        ids.iter()
            .all(|&id| id == 3 || tok.decode(&[id]).unwrap().trim().is_empty()),
        "{ids:?}"
    );
    assert_eq!(
        tok.encode("the cat", false).unwrap(),
        tokenizer(&metadata()).encode("the cat", false).unwrap()
    );
}

fn with_charsmap(bytes: Vec<u8>) -> HashMap<String, Value> {
    let mut md = metadata();
    md.insert(
        metadata::PRECOMPILED_CHARSMAP.into(),
        Value::Array(bytes.into_iter().map(Value::U8).collect()),
    );
    md
}

#[test]
fn a_charsmap_with_a_bad_header_is_refused_at_load() {
    for (bytes, says) in [
        (vec![1u8, 0], "header"),
        (vec![8u8, 0, 0, 0, 1, 2, 3, 4], "array is 8 bytes"),
        (vec![2u8, 0, 0, 0, 1, 2], "whole number"),
    ] {
        let err = Tokenizer::from_gguf_metadata(&with_charsmap(bytes))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(metadata::PRECOMPILED_CHARSMAP) && err.contains(says),
            "{err}"
        );
    }
}

#[test]
fn a_charsmap_pointing_outside_itself_fails_encoding_not_the_process() {
    // One node whose BASE sends the first byte to a node past the array's end.
    let root: u32 = 1000 << 10;
    let mut bytes = 4u32.to_le_bytes().to_vec();
    bytes.extend(root.to_le_bytes());
    bytes.extend(b"x\0");
    let tok = tokenizer(&with_charsmap(bytes));
    let err = tok.encode("abc", false).unwrap_err().to_string();
    assert!(err.contains(metadata::PRECOMPILED_CHARSMAP), "{err}");
}

#[test]
fn the_charsmap_replaces_the_longest_prefix() {
    let fixture = UnigramFixture::load();
    let map = Charsmap::parse(&fixture.charsmap()).unwrap();
    let m = |s: &str| {
        map.longest_match(s.as_bytes())
            .unwrap()
            .map(|(r, n)| (String::from_utf8(r.to_vec()).unwrap(), n))
    };
    assert_eq!(m("ﬁx"), Some(("fi".into(), 3)));
    // "e" + U+0301 is one rule: longer than "e" alone, which has none.
    assert_eq!(m("e\u{301}t"), Some(("é".into(), 3)));
    assert_eq!(m("et"), None);
    assert_eq!(m("\u{200b}a"), Some((String::new(), 3)));
    assert_eq!(m("Ｚ"), Some(("Z".into(), 3)));
}

#[test]
fn utf8_lengths_follow_llama_cpp() {
    assert_eq!(utf8_len(b'a'), 1);
    assert_eq!(utf8_len(0x80), 1);
    assert_eq!(utf8_len(0xC3), 2);
    assert_eq!(utf8_len(0xE6), 3);
    assert_eq!(utf8_len(0xF0), 4);
    assert_eq!(utf8_char_len("é".as_bytes()), Some(2));
    assert_eq!(utf8_char_len(&[0x80, 0x41]), None);
    assert_eq!(utf8_char_len(&[0xE6, 0x97]), None);
}

#[test]
fn a_trie_path_need_not_end_in_a_token() {
    let mut t = ByteTrie::default();
    t.insert(b"abc", 7);
    assert_eq!(t.longest_path(b"abx"), 2);
    assert_eq!(t.longest_path(b"abcd"), 3);
    assert_eq!(t.longest_path(b"x"), 0);
    assert_eq!(ByteTrie::default().longest_path(b"abc"), 0);
}
