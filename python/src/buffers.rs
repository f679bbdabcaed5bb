//! A round's buffers as the kernel call sees them: every device's operand and result
//! buffers of one `pallas_call` (XLA's memory, lent while the round's calls wait), and
//! the wiring of the simulated devices to them.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::BadInput;
use crate::xla_ffi::{self, Buffers};

/// Where a round's Rust devices read and write the XLA devices' buffers (see
/// `KernelCall.run_into`).
#[derive(Clone, Debug)]
pub struct Wiring {
    /// The XLA device each Rust device reads its operands from.
    pub rows: Vec<usize>,
    /// The operand of each Rust input.
    pub inputs: Vec<usize>,
    /// The Rust device each XLA device gets its results from.
    pub out_rows: Vec<usize>,
    /// The Rust output of each result (`None`: one Python writes).
    pub results: Vec<Option<usize>>,
}

/// A device's operand or result buffer: XLA's memory, valid while its call waits here.
#[derive(Clone, Copy)]
pub struct Span {
    data: *mut u8,
    len: usize,
}
// The pointers are only used while every device's call is held in the meeting.
unsafe impl Send for Span {}
unsafe impl Sync for Span {}

impl Span {
    /// The buffer's bytes (valid while its device's call waits in the meeting).
    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: XLA's buffer of that size, alive while its call waits in `join`.
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }

    /// The buffer, to write into.
    #[allow(clippy::mut_from_ref)] // XLA's memory, written by one thread: the leader's
    fn bytes_mut(&self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as in `bytes`; only the meeting's leader writes, once.
        unsafe { std::slice::from_raw_parts_mut(self.data, self.len) }
    }
}

/// One round's buffers: every device's operands (after the header) and results, XLA's
/// memory, lent to the meeting's Python callback while the round's calls wait; closed
/// (every access an error) once the callback returns.
#[pyclass(module = "tpusim._native", frozen)]
pub struct CallBuffers {
    ins: Vec<Vec<Span>>,
    outs: Vec<Vec<Span>>,
    open: AtomicBool,
}

impl CallBuffers {
    /// A round's buffers, open until [`CallBuffers::close`].
    pub fn new(ins: Vec<Vec<Span>>, outs: Vec<Vec<Span>>) -> Self {
        Self {
            ins,
            outs,
            open: AtomicBool::new(true),
        }
    }

    /// Closes them: XLA's buffers go back with the calls, nothing may touch them after.
    pub fn close(&self) {
        self.open.store(false, Ordering::Release);
    }

    /// The same buffers, for another thread to use while this round's calls wait for it.
    pub fn lend(&self) -> CallBuffers {
        CallBuffers {
            ins: self.ins.clone(),
            outs: self.outs.clone(),
            open: AtomicBool::new(self.open.load(Ordering::Acquire)),
        }
    }

    fn span(&self, results: bool, device: usize, k: usize) -> PyResult<&Span> {
        if !self.open.load(Ordering::Acquire) {
            return Err(BadInput::new_err(
                "bad input: the buffers of a pallas_call that has returned",
            ));
        }
        let (list, what) = if results {
            (&self.outs, "result")
        } else {
            (&self.ins, "operand")
        };
        list.get(device).and_then(|r| r.get(k)).ok_or_else(|| {
            pyo3::exceptions::PyIndexError::new_err(format!("no {what} {k} of device {device}"))
        })
    }

    /// Operand `k` of `device`.
    pub fn operand(&self, device: usize, k: usize) -> PyResult<&[u8]> {
        Ok(self.span(false, device, k)?.bytes())
    }

    /// The bytes of operands `keys` of every device, device after device: what a
    /// round's plan was chosen by when it depends on those operands' values (SMEM,
    /// scalar prefetch). `None` once closed, or where an operand is missing.
    pub fn key(&self, keys: &[usize]) -> Option<Vec<u8>> {
        if !self.open.load(Ordering::Acquire) {
            return None;
        }
        let mut key = Vec::new();
        for ops in &self.ins {
            for &k in keys {
                key.extend_from_slice(ops.get(k)?.bytes());
            }
        }
        Some(key)
    }

    /// Result `k` of `device`, to write into.
    #[allow(clippy::mut_from_ref)] // XLA's memory, written by the round's one runner
    pub fn result(&self, device: usize, k: usize) -> PyResult<&mut [u8]> {
        Ok(self.span(true, device, k)?.bytes_mut())
    }
}

#[pymethods]
impl CallBuffers {
    /// How many devices' buffers.
    #[getter]
    fn devices(&self) -> usize {
        self.ins.len()
    }

    /// A copy of operand `k` of `device`.
    fn operand_bytes<'py>(
        &self,
        py: Python<'py>,
        device: usize,
        k: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, self.operand(device, k)?))
    }

    /// Writes `data` (a C-contiguous uint8 buffer of the result's size) into result `k`
    /// of `device`.
    fn write_result(
        &self,
        py: Python<'_>,
        device: usize,
        k: usize,
        data: PyBuffer<u8>,
    ) -> PyResult<()> {
        let dst = self.result(device, k)?;
        if data.len_bytes() != dst.len() {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "result {k} of device {device}: {} bytes for a buffer of {}",
                data.len_bytes(),
                dst.len()
            )));
        }
        data.copy_to_slice(py, dst)
    }

    /// Zeros every result.
    fn zero_results(&self) -> PyResult<()> {
        for d in 0..self.outs.len() {
            for k in 0..self.outs[d].len() {
                self.result(d, k)?.fill(0);
            }
        }
        Ok(())
    }
}

/// The buffers of `list` from its `from`th on, as spans.
///
/// # Safety
/// `list` is a call frame's buffer list from XLA, alive while its call waits.
pub unsafe fn spans(list: &Buffers, from: usize) -> Result<Vec<Span>, String> {
    (from..list.size as usize)
        .map(|i| {
            let b = &**list.items.add(i);
            let elem = xla_ffi::element_bytes(b.dtype).ok_or_else(|| {
                format!(
                    "operand {i} has an XLA type ({}) tpusim cannot take",
                    b.dtype
                )
            })?;
            let n: i64 = (0..b.rank as usize).map(|k| *b.dims.add(k)).product();
            Ok(Span {
                data: b.data as *mut u8,
                len: n as usize * elem,
            })
        })
        .collect()
}
