//! The model's projections: one quantized matmul each, ours where we have a
//! kernel, candle's otherwise; and projections of one input fused into one.
//!
//! [`QLinear`] is one `[out, in]` weight. On the CPU, a weight whose GGUF type
//! has a kernel in [`crate::ops::qmatmul`] (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
//! Q2_K, Q3_K, Q4_K, Q5_K, Q6_K; IQ4_NL, IQ4_XS and MXFP4 arrive as Q8_0 and are packed in 4 bits
//! again, and IQ4_XS comes in its own blocks too where the reader carries them, `gguf::weight`,
//! and is packed as that)
//! is repacked once here and multiplied by our kernels, and an F16 or BF16 one is laid
//! out in strips for [`crate::ops::fmatmul`]'s (kept in its own type, not widened); any
//! other type (F32 too, see [`float_kind_of`]), and every weight on a GPU, keeps candle's
//! `QMatMul`.
//!
//! [`FusedLinear`]: Q, K and V (and the MLP's gate and up) read the same
//! normed hidden state. When their weights share a GGUF type, their rows are
//! concatenated into one matrix at load time, so the forward quantizes the
//! activations once and runs one larger matmul, then splits the output
//! columns. Each output column is still the dot product of the same weight
//! row with the same quantized input, so the numbers equal those of separate
//! matmuls.
//!
//! Counterpart: vLLM's `QKVParallelLinear` and `MergedColumnParallelLinear`.

use std::borrow::Cow;
use std::sync::Arc;

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::{GgmlDType, QMatMul};
use candle_core::{CpuStorage, CustomOp1, Device, Layout, Module, Shape, Tensor};

use super::gguf::weight::{native_kind, NativeBlocks, Weight};
use super::ModelError;
use crate::ops::fmatmul::{FloatKind, FloatMatrix};
use crate::ops::qmatmul::{PackedMatrix, QuantKind};

/// The GGUF types our CPU kernels take.
pub(super) fn kind_of(dtype: GgmlDType) -> Option<QuantKind> {
    Some(match dtype {
        GgmlDType::Q4_0 => QuantKind::Q4_0,
        GgmlDType::Q4_1 => QuantKind::Q4_1,
        GgmlDType::Q5_0 => QuantKind::Q5_0,
        GgmlDType::Q5_1 => QuantKind::Q5_1,
        GgmlDType::Q8_0 => QuantKind::Q8_0,
        GgmlDType::Q4K => QuantKind::Q4K,
        GgmlDType::Q5K => QuantKind::Q5K,
        GgmlDType::Q6K => QuantKind::Q6K,
        GgmlDType::Q3K => QuantKind::Q3K,
        GgmlDType::Q2K => QuantKind::Q2K,
        _ => return None,
    })
}

/// The unquantized GGUF types our float kernels take in a model. F32 matrices (MoE
/// routers, which llama.cpp's converters keep in F32 in every file, and tiny test files)
/// keep candle's matmul: a router's top-k follows its scores to the last bit, and the tests
/// against llama.cpp's references on F32 files were recorded agreeing with candle's order.
pub(super) fn float_kind_of(dtype: GgmlDType) -> Option<FloatKind> {
    Some(match dtype {
        GgmlDType::F16 => FloatKind::F16,
        GgmlDType::BF16 => FloatKind::Bf16,
        _ => return None,
    })
}

/// One `[out, in]` quantized weight and its matmul.
pub enum QLinear {
    /// Repacked for our quantized kernels, or F16/BF16 laid out for our float kernels
    /// (shared with a tied embedding's lookup).
    Ours(OurMatrix),
    /// candle's (other types, other devices).
    Candle(QMatMul),
}

impl QLinear {
    /// `bytes`: the GGUF blocks of a `[rows, cols]` matrix of `dtype`.
    fn from_bytes(dtype: GgmlDType, bytes: &[u8], rows: usize, cols: usize, device: &Device) -> Option<Self> {
        if !device.is_cpu() {
            return None;
        }
        if let Some(kind) = float_kind_of(dtype) {
            let m = FloatMatrix::new(kind, bytes, rows, cols).ok()?;
            return Some(Self::Ours(OurMatrix::Float(Arc::new(m))));
        }
        let kind = kind_of(dtype)?;
        let p = PackedMatrix::pack(kind, bytes, rows, cols).ok()?;
        Some(Self::Ours(OurMatrix::Packed(Arc::new(p))))
    }

    /// The file's own blocks of a type our kernels take natively (`gguf::weight`), packed.
    fn from_native(native: &NativeBlocks, rows: usize, cols: usize, device: &Device) -> Option<Self> {
        let kind = native_kind(native.ty).filter(|_| device.is_cpu())?;
        let p = PackedMatrix::pack(kind, &native.bytes, rows, cols).ok()?;
        Some(Self::Ours(OurMatrix::Packed(Arc::new(p))))
    }

    /// `t`'s projection: ours on the CPU for the types we have kernels for (the file's own
    /// blocks where it carries them), candle's otherwise.
    pub fn new(t: impl Into<Weight>, device: &Device) -> Result<Self, ModelError> {
        let (t, native) = t.into().into_parts();
        if let [rows, cols] = *t.shape().dims() {
            if let Some(l) = native.and_then(|n| Self::from_native(&n, rows, cols, device)) {
                return Ok(l);
            }
            if device.is_cpu() && (kind_of(t.dtype()).is_some() || float_kind_of(t.dtype()).is_some()) {
                if let Some(l) = Self::from_bytes(t.dtype(), &t.data()?, rows, cols, device) {
                    return Ok(l);
                }
            }
        }
        Ok(Self::Candle(QMatMul::from_qtensor(t)?))
    }

    /// `x`: `[.., in]` → `[.., out]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        Ok(match self {
            Self::Candle(m) => m.forward(x)?,
            Self::Ours(m) => x.contiguous()?.apply_op1_no_bwd(&OursOp(m))?,
        })
    }

    /// Whether our kernels run this projection.
    #[cfg(test)]
    pub fn is_packed(&self) -> bool {
        matches!(self, Self::Ours(_))
    }

    /// The repacked weight when our quantized kernels run this projection.
    pub fn packed(&self) -> Option<&PackedMatrix> {
        match self {
            Self::Ours(OurMatrix::Packed(p)) => Some(p),
            Self::Ours(OurMatrix::Float(_)) | Self::Candle(_) => None,
        }
    }

    /// The weight, shared, when our kernels run this projection: a tied embedding reads its
    /// rows back from it.
    pub fn shared_table(&self) -> Option<OurMatrix> {
        match self {
            Self::Ours(m) => Some(m.clone()),
            Self::Candle(_) => None,
        }
    }
}

/// A weight our CPU kernels hold, either family's; cloning shares it (a tied embedding
/// reads its rows back from the output projection's).
#[derive(Clone)]
pub enum OurMatrix {
    Packed(Arc<PackedMatrix>),
    Float(Arc<FloatMatrix>),
}

impl OurMatrix {
    pub fn rows(&self) -> usize {
        match self {
            Self::Packed(m) => m.rows(),
            Self::Float(m) => m.rows(),
        }
    }

    pub fn cols(&self) -> usize {
        match self {
            Self::Packed(m) => m.cols(),
            Self::Float(m) => m.cols(),
        }
    }

    /// Appends row `r`'s GGUF bytes (those the weight was made from, exactly).
    pub fn row_gguf(&self, r: usize, out: &mut Vec<u8>) {
        match self {
            Self::Packed(m) => m.row_gguf(r, out),
            Self::Float(m) => m.row_gguf(r, out),
        }
    }

    fn matmul(&self, x: &[f32], t: usize, out: &mut [f32]) {
        match self {
            Self::Packed(m) => m.matmul(x, t, out),
            Self::Float(m) => m.matmul(x, t, out),
        }
    }
}

/// Our matmul as a candle op on CPU storage (no copy of the input).
struct OursOp<'a>(&'a OurMatrix);

impl CustomOp1 for OursOp<'_> {
    fn name(&self) -> &'static str {
        "hearth-qmatmul"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let m = self.0;
        let dims = layout.shape().dims();
        let k = dims.last().copied().unwrap_or(0);
        if k != m.cols() {
            candle_core::bail!("qmatmul: input has {k} columns, the weight {}", m.cols());
        }
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("qmatmul: input must be f32");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("qmatmul: input must be contiguous");
        };
        let x = &data[start..end];
        let t = x.len() / k;
        let mut out = vec![0f32; t * m.rows()];
        m.matmul(x, t, &mut out);
        let mut shape = dims.to_vec();
        if let Some(last) = shape.last_mut() {
            *last = m.rows();
        }
        Ok((CpuStorage::F32(out), Shape::from(shape)))
    }
}

enum Parts {
    Fused(QLinear),
    Separate(Vec<QLinear>),
}

/// Several `[out_i, in]` projections of the same input.
pub struct FusedLinear {
    parts: Parts,
    widths: Vec<usize>,
}

impl FusedLinear {
    /// Fuses `weights` (all `[out_i, in]`) when they share a type; otherwise
    /// keeps them as separate matmuls.
    pub fn new<W: Into<Weight>>(weights: Vec<W>, device: &Device) -> Result<Self, ModelError> {
        let weights: Vec<Weight> = weights.into_iter().map(Into::into).collect();
        let widths: Vec<usize> = weights.iter().map(|w| w.shape().dims()[0]).collect();
        let dtype = weights[0].dtype();
        let cols = weights[0].shape().dims()[1];
        let same = weights
            .iter()
            .all(|w| w.dtype() == dtype && w.shape().dims()[1] == cols);
        // The file's own blocks, when every part carries them in one type.
        let native_ty = weights[0].native().map(|n| n.ty);
        let one_native = same && weights.len() > 1 && weights.iter().all(|w| w.native().map(|n| n.ty) == native_ty);
        if let Some(ty) = native_ty.filter(|_| one_native) {
            let bytes = weights.iter().filter_map(|w| w.native()).flat_map(|n| n.bytes.iter().copied()).collect();
            if let Some(l) = QLinear::from_native(&NativeBlocks { ty, bytes }, widths.iter().sum(), cols, device) {
                return Ok(Self {
                    parts: Parts::Fused(l),
                    widths,
                });
            }
        }
        if same && weights.len() > 1 {
            let mut bytes: Vec<u8> = Vec::new();
            for w in &weights {
                bytes.extend_from_slice(&w.data()?);
            }
            let rows = widths.iter().sum();
            if let Some(l) = QLinear::from_bytes(dtype, &bytes, rows, cols, device) {
                return Ok(Self {
                    parts: Parts::Fused(l),
                    widths,
                });
            }
            // A type candle cannot rebuild from bytes stays unfused.
            if let Ok(t) = qtensor_from_ggml(dtype, &Cow::from(bytes), vec![rows, cols], device) {
                return Ok(Self {
                    parts: Parts::Fused(QLinear::Candle(QMatMul::from_qtensor(t)?)),
                    widths,
                });
            }
        }
        let parts = weights
            .into_iter()
            .map(|w| QLinear::new(w, device))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            parts: Parts::Separate(parts),
            widths,
        })
    }

    /// `x`: `[tokens, in]` → one `[tokens, out_i]` per projection.
    pub fn forward(&self, x: &Tensor) -> Result<Vec<Tensor>, ModelError> {
        match &self.parts {
            Parts::Separate(ms) => ms.iter().map(|m| m.forward(x)).collect(),
            Parts::Fused(m) => {
                let y = m.forward(x)?;
                let mut out = Vec::with_capacity(self.widths.len());
                let mut at = 0;
                for w in &self.widths {
                    out.push(y.narrow(1, at, *w)?);
                    at += w;
                }
                Ok(out)
            }
        }
    }

    /// `x`: `[tokens, in]` → `[tokens, Σ out_i]`, the projections' columns side by side (one
    /// matmul's output when fused).
    pub fn forward_joined(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        match &self.parts {
            Parts::Fused(m) => m.forward(x),
            Parts::Separate(ms) => {
                let parts = ms.iter().map(|m| m.forward(x)).collect::<Result<Vec<_>, _>>()?;
                Ok(Tensor::cat(&parts, 1)?)
            }
        }
    }

    /// The one repacked weight our kernels run, of a fused projection (its output columns
    /// are the parts' in order) or of a single one.
    pub fn packed(&self) -> Option<&PackedMatrix> {
        match &self.parts {
            Parts::Fused(l) => l.packed(),
            Parts::Separate(ms) if ms.len() == 1 => ms[0].packed(),
            Parts::Separate(_) => None,
        }
    }

    /// How many projections it computes.
    pub fn parts(&self) -> usize {
        self.widths.len()
    }

    #[cfg(test)]
    fn is_fused(&self) -> bool {
        matches!(self.parts, Parts::Fused(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QTensor};

    fn weight(rows: usize, cols: usize, seed: u32, dtype: GgmlDType) -> QTensor {
        let data: Vec<f32> = (0..rows * cols)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        QTensor::quantize(&Tensor::from_vec(data, (rows, cols), &Device::Cpu).unwrap(), dtype).unwrap()
    }

    #[test]
    fn fused_equals_separate_matmuls() {
        let cpu = Device::Cpu;
        let x = Tensor::from_vec(
            (0..3 * 64).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>(),
            (3, 64),
            &cpu,
        )
        .unwrap();
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4_0, GgmlDType::F32, GgmlDType::F16, GgmlDType::BF16] {
            let shapes = [(32, 1), (16, 2), (16, 3)];
            let ws = shapes.iter().map(|&(r, s)| weight(r, 64, s, dtype)).collect();
            let fused = FusedLinear::new(ws, &cpu).unwrap();
            assert!(fused.is_fused(), "{dtype:?}");
            let outs = fused.forward(&x).unwrap();
            for (&(r, s), y) in shapes.iter().zip(outs) {
                let w = weight(r, 64, s, dtype);
                let single = QLinear::new(w, &cpu).unwrap();
                assert_eq!(single.is_packed(), dtype != GgmlDType::F32, "{dtype:?}");
                let expect = single.forward(&x).unwrap();
                let d: f32 = (y - expect)
                    .unwrap()
                    .abs()
                    .unwrap()
                    .max_all()
                    .unwrap()
                    .to_scalar()
                    .unwrap();
                assert_eq!(d, 0.0, "{dtype:?}");
            }
        }
    }

    /// IQ4_XS weights carried in their own blocks fuse in them: the fused matmul is ours on
    /// IQ4_XS, with each part's bits; a part without them keeps all on the Q8_0 reading.
    #[test]
    fn iq4_xs_weights_fuse_in_their_own_blocks() {
        let cpu = Device::Cpu;
        let iq4 = |rows: usize, seed: u32| crate::model::gguf::weight::iq4_xs_weight(rows, 256, seed);
        let x = Tensor::from_vec((0..2 * 256).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>(), (2, 256), &cpu).unwrap();
        let shapes = [(32, 1), (16, 2), (24, 3)];
        let fused = FusedLinear::new(shapes.iter().map(|&(r, s)| iq4(r, s)).collect(), &cpu).unwrap();
        let Parts::Fused(l) = &fused.parts else { panic!("not fused") };
        assert_eq!(l.packed().map(PackedMatrix::kind), Some(QuantKind::Iq4Xs));
        for (&(r, s), y) in shapes.iter().zip(fused.forward(&x).unwrap()) {
            let single = QLinear::new(iq4(r, s), &cpu).unwrap();
            assert_eq!(single.packed().map(PackedMatrix::kind), Some(QuantKind::Iq4Xs));
            let (y, want): (Vec<Vec<f32>>, Vec<Vec<f32>>) = (y.to_vec2().unwrap(), single.forward(&x).unwrap().to_vec2().unwrap());
            assert_eq!(y, want);
        }
        let (a, b) = (iq4(32, 1), iq4(16, 2).into_tensor());
        let mixed = FusedLinear::new(vec![a, Weight::from(b)], &cpu).unwrap();
        let Parts::Fused(l) = &mixed.parts else { panic!("not fused") };
        assert_eq!(l.packed().map(PackedMatrix::kind), Some(QuantKind::Q8Iq4nl));
    }

    #[test]
    fn mixed_types_stay_separate() {
        let cpu = Device::Cpu;
        let ws = vec![weight(32, 64, 1, GgmlDType::Q8_0), weight(32, 64, 2, GgmlDType::Q4_0)];
        let l = FusedLinear::new(ws, &cpu).unwrap();
        assert!(!l.is_fused());
        let x = Tensor::ones((2, 64), candle_core::DType::F32, &cpu).unwrap();
        let outs = l.forward(&x).unwrap();
        assert_eq!(outs[1].dims(), &[2, 32]);
    }
}
