//! Arrays across the boundary: numpy arrays (float32, int32, float16, ml_dtypes'
//! bfloat16, int8, uint8, bool) in and out as host arrays.

use crate::errors::{BadInput, OrPy};
use numpy::{PyArray1, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use tpusim::{DType, HostArray};

/// A numpy array (C-contiguous) as a host array.
pub fn to_host(x: &Bound<'_, PyAny>) -> PyResult<HostArray> {
    if let Ok(a) = x.extract::<PyReadonlyArrayDyn<'_, f32>>() {
        let shape = a.shape().to_vec();
        return HostArray::from_f32(&shape, a.as_slice()?.to_vec()).py();
    }
    if let Ok(a) = x.extract::<PyReadonlyArrayDyn<'_, i32>>() {
        let shape = a.shape().to_vec();
        return HostArray::from_i32(&shape, a.as_slice()?.to_vec()).py();
    }
    if let Ok(a) = x.extract::<PyReadonlyArrayDyn<'_, i8>>() {
        let words = a.as_slice()?.iter().map(|&v| v as i32 as u32).collect();
        return HostArray::from_words(DType::I8, a.shape(), words).py();
    }
    if let Ok(a) = x.extract::<PyReadonlyArrayDyn<'_, u8>>() {
        let words = a.as_slice()?.iter().map(|&v| u32::from(v)).collect();
        return HostArray::from_words(DType::U8, a.shape(), words).py();
    }
    if let Ok(a) = x.extract::<PyReadonlyArrayDyn<'_, bool>>() {
        let words = a.as_slice()?.iter().map(|&v| u32::from(v)).collect();
        return HostArray::from_words(DType::Bool, a.shape(), words).py();
    }
    if let Ok(a) = x.extract::<PyReadonlyArrayDyn<'_, half::f16>>() {
        let shape = a.shape().to_vec();
        return HostArray::from_f16(&shape, a.as_slice()?.to_vec()).py();
    }
    // Only a bfloat16 array is extracted as one: numpy's bf16 type exists only once
    // ml_dtypes (which defines it) is imported.
    let is_bf16 = x
        .getattr("dtype")
        .and_then(|d| d.getattr("name"))
        .is_ok_and(|n| n.to_string() == "bfloat16");
    if is_bf16 {
        let a = x.extract::<PyReadonlyArrayDyn<'_, half::bf16>>()?;
        let shape = a.shape().to_vec();
        return HostArray::from_bf16(&shape, a.as_slice()?.to_vec()).py();
    }
    let what = x
        .getattr("dtype")
        .map(|d| d.to_string())
        .unwrap_or_else(|_| x.get_type().to_string());
    Err(BadInput::new_err(format!(
        "bad input: arrays must be numpy float32, int32, float16, bfloat16 (ml_dtypes), int8, uint8 or bool, C-contiguous; got {what}"
    )))
}

/// A host array as a numpy array.
pub fn to_numpy<'py>(py: Python<'py>, a: &HostArray) -> PyResult<Bound<'py, PyAny>> {
    let flat = match a.dtype {
        DType::F32 => PyArray1::from_vec(py, a.as_f32().to_vec()).into_any(),
        DType::I32 => PyArray1::from_vec(py, a.as_i32().to_vec()).into_any(),
        DType::F16 => {
            let v: Vec<half::f16> = a.halves().into_iter().map(half::f16::from_bits).collect();
            PyArray1::from_vec(py, v).into_any()
        }
        DType::I8 => PyArray1::from_vec(py, a.words.iter().map(|&w| w as i8).collect()).into_any(),
        DType::U8 => PyArray1::from_vec(py, a.words.iter().map(|&w| w as u8).collect()).into_any(),
        DType::Bool => PyArray1::from_vec(py, a.words.iter().map(|&w| w != 0).collect()).into_any(),
        DType::BF16 => {
            // numpy's bfloat16 is ml_dtypes'; without it there is no array to return.
            py.import("ml_dtypes").map_err(|_| {
                BadInput::new_err(
                    "bad input: bf16 results are ml_dtypes.bfloat16 arrays; install ml_dtypes (pip install ml_dtypes)",
                )
            })?;
            let v: Vec<half::bf16> = a.halves().into_iter().map(half::bf16::from_bits).collect();
            PyArray1::from_vec(py, v).into_any()
        }
    };
    flat.call_method1("reshape", (a.shape.clone(),))
}

/// [`to_numpy`], the 32-bit words handed over without a copy when an element is one
/// word (f32, i32).
pub fn into_numpy(py: Python<'_>, a: HostArray) -> PyResult<Bound<'_, PyAny>> {
    let dtype = match a.dtype {
        DType::F32 => "float32",
        DType::I32 => "int32",
        _ => return to_numpy(py, &a),
    };
    PyArray1::from_vec(py, a.words)
        .into_any()
        .call_method1("view", (dtype,))?
        .call_method1("reshape", (a.shape,))
}

/// `inputs[device][operand]` numpy arrays as host arrays.
pub fn per_device(inputs: &[Vec<Bound<'_, PyAny>>]) -> PyResult<Vec<Vec<HostArray>>> {
    inputs
        .iter()
        .map(|d| d.iter().map(to_host).collect())
        .collect()
}

/// `outputs[device][operand]` host arrays as numpy arrays (without a copy where
/// [`into_numpy`] can).
pub fn to_numpy_all(
    py: Python<'_>,
    out: Vec<Vec<HostArray>>,
) -> PyResult<Vec<Vec<Bound<'_, PyAny>>>> {
    out.into_iter()
        .map(|d| d.into_iter().map(|a| into_numpy(py, a)).collect())
        .collect()
}

/// Rust data as Python objects (dicts, lists, numbers, strings).
pub fn to_py_data<'py>(py: Python<'py>, v: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    pythonize::pythonize(py, v).map_err(PyErr::from)
}
