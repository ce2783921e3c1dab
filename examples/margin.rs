use candle_core::Device;
use hearth::model::gguf::GgufFile;
use hearth::model::tokenizer::Tokenizer;
use hearth::model::{Logits, Transformer};
use hearth::ops::{BatchLayout, ContiguousBatch, ContiguousKv};
fn last(tf: &Transformer, ids: &[u32]) -> Vec<f32> {
    let mut kv = ContiguousKv::new(tf.kv_shape(), candle_core::DType::F32, &Device::Cpu, 1024);
    let batch = BatchLayout::single(0, ids.len()).unwrap();
    tf.forward(
        ids,
        &batch,
        &mut ContiguousBatch::new(vec![&mut kv]),
        Logits::LastPerSequence,
    )
    .unwrap()
    .flatten_all()
    .unwrap()
    .to_vec1::<f32>()
    .unwrap()
}
fn top2(v: &[f32]) -> (usize, f32, usize) {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|a, b| v[*b].partial_cmp(&v[*a]).unwrap());
    (idx[0], v[idx[0]] - v[idx[1]], idx[1])
}
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let load = |p: &str| {
        let mut f = GgufFile::open(std::path::Path::new(p)).unwrap();
        Transformer::from_gguf(&mut f, &Device::Cpu, 1024).unwrap()
    };
    let md = GgufFile::open(std::path::Path::new(&a[1])).unwrap().metadata().clone();
    let tok = Tokenizer::from_gguf_metadata(&md).unwrap();
    let (q, t) = (load(&a[1]), load(&a[2]));
    for qn in [
        "What is the capital of France?",
        "What is 7 plus 5?",
        "Name the largest planet in the solar system.",
        "What color is the sky on a clear day?",
        "Translate 'thank you' into Spanish.",
    ] {
        let p = format!("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\n{qn}<|im_end|>\n<|im_start|>assistant\n");
        let ids = tok.encode(&p, tok.add_bos()).unwrap();
        let (oq, mq, sq) = top2(&last(&q, &ids));
        let (ot, mt, st) = top2(&last(&t, &ids));
        let s = |i: usize| tok.decode(&[i as u32]).unwrap_or_default();
        println!(
            "{qn:45} quantized: {:?} (2nd {:?}, margin {mq:.3}) | f32 weights: {:?} (2nd {:?}, margin {mt:.3})",
            s(oq),
            s(sq),
            s(ot),
            s(st)
        );
    }
}
