//! NumPy `.npy` files in and out (f32 and i32, C order), through the `npyz` crate.

use crate::array::{DType, HostArray};
use crate::error::{Error, Result};
use npyz::WriterBuilder;
use std::path::Path;

/// Reads a `.npy` file of float32 or int32 values in C order.
pub fn read_npy(path: &Path) -> Result<HostArray> {
    let bytes = std::fs::read(path)?;
    let npy = npyz::NpyFile::new(&bytes[..])
        .map_err(|e| Error::bad_input(format!("{} is not a .npy file: {e}", path.display())))?;
    if npy.order() != npyz::Order::C {
        return Err(Error::bad_input(format!(
            "{} is in Fortran order; save it with np.ascontiguousarray first",
            path.display()
        )));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let descr = npy.dtype().descr();
    let kind = match &npy.dtype() {
        npyz::DType::Plain(ts) => Some((ts.type_char(), ts.size_field())),
        _ => None,
    };
    let shape = if shape.is_empty() { vec![1] } else { shape };
    match kind {
        Some((npyz::TypeChar::Float, 4)) => HostArray::from_f32(&shape, npy.into_vec::<f32>()?),
        Some((npyz::TypeChar::Int, 4)) => HostArray::from_i32(&shape, npy.into_vec::<i32>()?),
        _ => Err(Error::bad_input(format!(
            "{} holds dtype {descr}; tpusim reads float32 (<f4) and int32 (<i4)",
            path.display()
        ))),
    }
}

/// Writes `a` as a `.npy` file (C order).
pub fn write_npy(path: &Path, a: &HostArray) -> Result<()> {
    let shape: Vec<u64> = a.shape.iter().map(|&d| d as u64).collect();
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    match a.dtype {
        DType::F32 => {
            let mut w = npyz::WriteOptions::new()
                .default_dtype()
                .shape(&shape)
                .writer(file)
                .begin_nd()?;
            w.extend(a.as_f32().iter().copied())?;
            w.finish()?;
        }
        DType::I32 => {
            let mut w = npyz::WriteOptions::new()
                .default_dtype()
                .shape(&shape)
                .writer(file)
                .begin_nd()?;
            w.extend(a.as_i32().iter().copied())?;
            w.finish()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_both_dtypes() {
        let dir = std::env::temp_dir().join(format!("tpusim-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = HostArray::from_f32(&[2, 3], vec![0.5, -1.0, 2.25, 3.0, 4.0, 1e-3]).unwrap();
        let i = HostArray::from_i32(&[3, 1, 2], vec![1, -2, 3, -4, 5, i32::MAX]).unwrap();
        for (name, a) in [("f.npy", &f), ("i.npy", &i)] {
            let p = dir.join(name);
            write_npy(&p, a).unwrap();
            assert_eq!(&read_npy(&p).unwrap(), a);
        }
        // A float64 file is refused with its dtype named.
        let p = dir.join("d.npy");
        let mut w = npyz::WriteOptions::new()
            .default_dtype()
            .shape(&[2])
            .writer(std::fs::File::create(&p).unwrap())
            .begin_nd()
            .unwrap();
        w.extend([1.0f64, 2.0]).unwrap();
        w.finish().unwrap();
        let e = read_npy(&p).unwrap_err().to_string();
        assert!(e.contains("<f8") && e.contains("float32"), "{e}");
    }
}
