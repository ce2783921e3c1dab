//! The simple K/V store: one growable token-major buffer per sequence and layer.

use candle_core::{DType, Device, Tensor};

use super::{attention, Attend, BatchLayout, KvShape, KvStore, OpsError};

/// The K/V history of one sequence: for every layer, a `[capacity, kv_heads,
/// head_dim]` buffer whose first `len` rows are filled.
///
/// The buffer grows by doubling (one copy, amortised), never by concatenating
/// every step; `max_tokens` bounds it (the model's context length).
#[derive(Debug)]
pub struct ContiguousKv {
    shape: KvShape,
    dtype: DType,
    device: Device,
    max_tokens: usize,
    layers: Vec<Option<(Tensor, Tensor)>>,
    /// Filled rows per layer (equal across layers between forward calls).
    lens: Vec<usize>,
}

impl ContiguousKv {
    pub fn new(shape: KvShape, dtype: DType, device: &Device, max_tokens: usize) -> Self {
        Self {
            layers: vec![None; shape.layers()],
            lens: vec![0; shape.layers()],
            shape,
            dtype,
            device: device.clone(),
            max_tokens,
        }
    }

    /// Tokens held (those written to every layer).
    pub fn len(&self) -> usize {
        self.lens.iter().copied().min().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything after the first `len` tokens (for example to
    /// re-run a turn). Keeps the buffers.
    pub fn truncate(&mut self, len: usize) {
        for l in &mut self.lens {
            *l = (*l).min(len);
        }
    }

    fn capacity(&self, layer: usize) -> usize {
        self.layers[layer].as_ref().map_or(0, |(k, _)| k.dims()[0])
    }

    fn ensure_capacity(&mut self, layer: usize, needed: usize) -> Result<(), OpsError> {
        if needed > self.max_tokens {
            return Err(OpsError::CapacityExceeded {
                needed,
                capacity: self.max_tokens,
            });
        }
        let cap = self.capacity(layer);
        if needed <= cap {
            return Ok(());
        }
        let new_cap = needed.max(cap * 2).max(64).min(self.max_tokens);
        let l = self.shape.layer(layer);
        let dims = (new_cap, l.kv_heads, l.head_dim);
        let k = Tensor::zeros(dims, self.dtype, &self.device)?;
        let v = Tensor::zeros(dims, self.dtype, &self.device)?;
        if let Some((old_k, old_v)) = &self.layers[layer] {
            let len = self.lens[layer];
            k.slice_set(&old_k.narrow(0, 0, len)?.contiguous()?, 0, 0)?;
            v.slice_set(&old_v.narrow(0, 0, len)?.contiguous()?, 0, 0)?;
        }
        self.layers[layer] = Some((k, v));
        Ok(())
    }

    /// Writes `k`, `v` (`[new, kv_heads, head_dim]`) at position `at` of `layer`
    /// and returns views of rows `0 .. at + new`.
    fn append(&mut self, layer: usize, at: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor), OpsError> {
        if layer >= self.layers.len() {
            return Err(OpsError::Layout(format!(
                "layer {layer} of a {}-layer store",
                self.layers.len()
            )));
        }
        if at != self.lens[layer] {
            return Err(OpsError::Layout(format!(
                "layer {layer} holds {} tokens but the batch says {at} are cached",
                self.lens[layer]
            )));
        }
        let new = k.dims()[0];
        self.ensure_capacity(layer, at + new)?;
        let Some((kb, vb)) = &self.layers[layer] else {
            return Err(OpsError::Layout("buffer missing after allocation".into()));
        };
        kb.slice_set(&k.to_dtype(self.dtype)?.contiguous()?, 0, at)?;
        vb.slice_set(&v.to_dtype(self.dtype)?.contiguous()?, 0, at)?;
        self.lens[layer] = at + new;
        Ok((kb.narrow(0, 0, at + new)?, vb.narrow(0, 0, at + new)?))
    }
}

impl ContiguousKv {
    /// Views of `layer`'s rows `0 .. len`, which must be exactly the rows it holds.
    fn written(&self, layer: usize, len: usize) -> Result<(Tensor, Tensor), OpsError> {
        match (self.layers.get(layer), self.lens.get(layer)) {
            (Some(Some((k, v))), Some(&held)) if held == len => Ok((k.narrow(0, 0, len)?, v.narrow(0, 0, len)?)),
            (_, held) => Err(OpsError::Layout(format!(
                "layer {layer} holds {} tokens, but the batch reads {len}",
                held.copied().unwrap_or(0)
            ))),
        }
    }
}

/// The sequences' outputs in batch order, as one tensor.
fn joined(mut outs: Vec<Tensor>) -> Result<Tensor, OpsError> {
    if outs.len() == 1 {
        return Ok(outs.remove(0));
    }
    Ok(Tensor::cat(&outs, 0)?)
}

/// A [`KvStore`] over several sequences' [`ContiguousKv`]: sequence `i` of the
/// batch is `seqs[i]`.
pub struct ContiguousBatch<'a> {
    pub seqs: Vec<&'a mut ContiguousKv>,
}

impl<'a> ContiguousBatch<'a> {
    pub fn new(seqs: Vec<&'a mut ContiguousKv>) -> Self {
        Self { seqs }
    }

    /// Whether `batch` has one sequence per store.
    fn check_len(&self, batch: &BatchLayout) -> Result<(), OpsError> {
        if batch.len() != self.seqs.len() {
            return Err(OpsError::Layout(format!(
                "batch has {} sequences, store {}",
                batch.len(),
                self.seqs.len()
            )));
        }
        Ok(())
    }
}

impl KvStore for ContiguousBatch<'_> {
    fn attend(
        &mut self,
        layer: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        batch: &BatchLayout,
        how: Attend<'_>,
    ) -> Result<Tensor, OpsError> {
        self.check_len(batch)?;
        let mut outs = Vec::with_capacity(batch.len());
        for (i, (chunk, store)) in batch.seqs().iter().zip(self.seqs.iter_mut()).enumerate() {
            let rows = |t: &Tensor| t.narrow(0, batch.offset(i), chunk.new);
            let (k_all, v_all) = store.append(layer, chunk.cached, &rows(k)?, &rows(v)?)?;
            let q_s = rows(q)?;
            let k_all = k_all.to_dtype(q_s.dtype())?;
            let v_all = v_all.to_dtype(q_s.dtype())?;
            outs.push(attention::attend(&q_s, &k_all, &v_all, chunk.cached, how)?);
        }
        joined(outs)
    }

    fn attend_shared(&mut self, layer: usize, q: &Tensor, batch: &BatchLayout, how: Attend<'_>) -> Result<Tensor, OpsError> {
        self.check_len(batch)?;
        let mut outs = Vec::with_capacity(batch.len());
        for (i, (chunk, store)) in batch.seqs().iter().zip(self.seqs.iter()).enumerate() {
            let q_s = q.narrow(0, batch.offset(i), chunk.new)?;
            let (k_all, v_all) = store.written(layer, chunk.cached + chunk.new)?;
            let (k_all, v_all) = (k_all.to_dtype(q_s.dtype())?, v_all.to_dtype(q_s.dtype())?);
            outs.push(attention::attend(&q_s, &k_all, &v_all, chunk.cached, how)?);
        }
        joined(outs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_keeps_history() {
        let shape = KvShape::uniform(1, 1, 2);
        let mut kv = ContiguousKv::new(shape, DType::F32, &Device::Cpu, 1000);
        for step in 0..100u32 {
            let row = Tensor::new(&[[[step as f32, -(step as f32)]]], &Device::Cpu).unwrap();
            let (k, _) = kv.append(0, step as usize, &row, &row).unwrap();
            assert_eq!(k.dims()[0], step as usize + 1);
        }
        let (k, _) = kv
            .append(
                0,
                100,
                &Tensor::zeros((1, 1, 2), DType::F32, &Device::Cpu).unwrap(),
                &Tensor::zeros((1, 1, 2), DType::F32, &Device::Cpu).unwrap(),
            )
            .unwrap();
        let first: Vec<f32> = k.narrow(0, 37, 1).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(first, vec![37.0, -37.0]);
    }

    #[test]
    fn refuses_past_max_tokens_and_wrong_position() {
        let shape = KvShape::uniform(1, 1, 2);
        let mut kv = ContiguousKv::new(shape, DType::F32, &Device::Cpu, 4);
        let x = Tensor::zeros((5, 1, 2), DType::F32, &Device::Cpu).unwrap();
        assert!(matches!(
            kv.append(0, 0, &x, &x),
            Err(OpsError::CapacityExceeded { .. })
        ));
        let y = Tensor::zeros((1, 1, 2), DType::F32, &Device::Cpu).unwrap();
        assert!(kv.append(0, 3, &y, &y).is_err());
    }
}
