//! Splitting one op's work across the CPU threads.
//!
//! The forward's ops are small and many (a decode step runs a few hundred
//! matmuls and attention calls of tens of microseconds each), so they run on
//! candle's barrier pool: workers spin briefly between calls instead of
//! sleeping, so a call starts in microseconds, and the calling thread works
//! too. Its size follows `RAYON_NUM_THREADS` (set by `--threads`, see
//! [`crate::runtime::cpu`]) when it is first used.
//!
//! Counterpart: llama.cpp's ggml-cpu threadpool (spin, then sleep).

use std::cell::RefCell;
use std::ops::Range;
use std::thread::LocalKey;

/// Runs `f` with this thread's scratch buffer from `key`, reused from call to
/// call; a nested call on the same thread (the buffer already in use) gets a
/// fresh one instead of panicking.
pub fn with_scratch<T: Default + 'static, R>(key: &'static LocalKey<RefCell<T>>, f: impl FnOnce(&mut T) -> R) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut held) => f(&mut held),
        Err(_) => f(&mut T::default()),
    })
}

/// Runs `f` over ranges covering `0..n` on every thread of the pool (ranges
/// taken from a shared cursor, so a busy core does less), or inline when the
/// pool has no workers or `n` is 1.
pub fn for_ranges<F: Fn(Range<usize>) + Sync>(n: usize, f: F) {
    let pool = candle_core::utils::barrier_pool();
    // (Not `candle_core::utils::get_num_threads()`: without RAYON_NUM_THREADS set it
    // reads /proc/cpuinfo on every call, longer than a decode step's matmul.)
    if n <= 1 || pool.n_workers() == 0 {
        f(0..n);
    } else {
        pool.execute_chunked(n, f);
    }
}

/// Runs `f(r, row)` for every `width`-long row `r` of `out`: on the calling
/// thread when `out` has fewer than `serial_below` elements, else with the
/// rows split across the pool ([`for_ranges`]).
pub fn for_rows<T: Send, F: Fn(usize, &mut [T]) + Sync>(out: &mut [T], width: usize, serial_below: usize, f: F) {
    if width == 0 {
        return;
    }
    let rows = out.len() / width;
    if out.len() < serial_below {
        for (r, o) in out.chunks_exact_mut(width).enumerate() {
            f(r, o);
        }
        return;
    }
    let shared = SharedMut::new(out);
    for_ranges(rows, |range| {
        for r in range {
            // SAFETY: `for_ranges` hands out disjoint ranges of rows.
            f(r, unsafe { shared.part(r * width, width) });
        }
    });
}

/// A slice that parallel workers write in disjoint parts.
pub struct SharedMut<'a, T> {
    ptr: *mut T,
    len: usize,
    _slice: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: only `part` hands out access, and its callers promise disjoint parts.
unsafe impl<T: Send> Send for SharedMut<'_, T> {}
unsafe impl<T: Send> Sync for SharedMut<'_, T> {}

impl<'a, T> SharedMut<'a, T> {
    pub fn new(slice: &'a mut [T]) -> Self {
        Self {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
            _slice: std::marker::PhantomData,
        }
    }

    /// `[at, at + len)` of the slice.
    ///
    /// # Safety
    /// No two parts in use at the same time may overlap (each worker of
    /// [`for_ranges`] takes the part of its own range).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn part(&self, at: usize, len: usize) -> &mut [T] {
        assert!(at + len <= self.len, "part {at}+{len} outside a slice of {}", self.len);
        std::slice::from_raw_parts_mut(self.ptr.add(at), len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_is_visited_once() {
        let mut v = vec![0u32; 1000];
        let shared = SharedMut::new(&mut v);
        for_ranges(1000, |r| {
            // SAFETY: ranges from `for_ranges` are disjoint.
            let part = unsafe { shared.part(r.start, r.len()) };
            part.iter_mut().for_each(|x| *x += 1);
        });
        assert!(v.iter().all(|&x| x == 1));
    }

    #[test]
    fn every_row_is_visited_once_with_its_index() {
        for serial_below in [0, usize::MAX] {
            let mut v = vec![0usize; 7 * 300];
            for_rows(&mut v, 7, serial_below, |r, row| row.iter_mut().for_each(|x| *x += r + 1));
            assert!(v.chunks(7).enumerate().all(|(r, row)| row.iter().all(|&x| x == r + 1)));
        }
    }
}
