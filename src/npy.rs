//! NumPy `.npy` files in and out (f32 and i32, C order), through the `npyz` crate.
//! Headers are untrusted: the header's length and the shape's element count are checked
//! against the bytes the file holds before anything is allocated for them.

use crate::array::{DType, HostArray};
use crate::error::{Error, Result};
use crate::files::Output;
use npyz::WriterBuilder;
use std::path::Path;

/// The longest header accepted (NumPy's own readers refuse headers over 10 000 bytes
/// unless told otherwise; a float32 or int32 array's header is under 200).
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// Reads a `.npy` file of float32 or int32 values in C order. A file larger than half
/// the available memory (it is held twice: as read and as decoded) is refused unread;
/// a stream (a pipe, `/dev/zero`) is read as far as its header says, and no further
/// than that bound.
pub fn read_npy(path: &Path) -> Result<HostArray> {
    let cap = crate::budget::available()?.map(|a| a.bytes / 2);
    let name = path.display().to_string();
    let bytes = crate::files::read_with(path, "input", cap, |r| {
        read_npy_bytes(r, &name).map_err(|e| match e {
            Error::Io(source) => Error::File {
                action: "read input".into(),
                path: path.to_path_buf(),
                source,
            },
            e => e,
        })
    })?;
    parse_npy(&bytes, &name)
}

/// The bytes of a `.npy` file from `r`, read as its header says: the prefix, the header,
/// then the data bytes its shape and dtype make and one byte more where there are more
/// (for [`parse_npy`] to say so). Bytes that cannot start a `.npy` file stop it at once.
fn read_npy_bytes(r: &mut dyn std::io::Read, name: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let mut more = |bytes: &mut Vec<u8>, n: u64| (&mut *r).take(n).read_to_end(bytes).map(drop);
    more(&mut bytes, 12)?;
    let (start, len) = prefix(&bytes, name)?;
    let header_left = (start + len).saturating_sub(bytes.len()) as u64;
    more(&mut bytes, header_left)?;
    let Ok(header) = npyz::NpyHeader::from_reader(&bytes[..(start + len).min(bytes.len())]) else {
        // parse_npy says what is wrong with it.
        return Ok(bytes);
    };
    let npy = npyz::NpyFile::with_header(header, std::io::empty());
    let data = npy
        .shape()
        .iter()
        .try_fold(npy.dtype().num_bytes().unwrap_or(0) as u64, |acc, &d| {
            acc.checked_mul(d)
        });
    // A count past u64 reads nothing more: parse_npy refuses the shape.
    if let Some(data) = data {
        let have = (bytes.len() - (start + len).min(bytes.len())) as u64;
        let data_left = (data - have.min(data)).saturating_add(1);
        more(&mut bytes, data_left)?;
    }
    Ok(bytes)
}

/// Length of the magic string, version and header-length prefix, and of the header
/// text, from the first bytes of a `.npy` file (`name` names it in errors).
fn prefix(bytes: &[u8], name: &str) -> Result<(usize, usize)> {
    let not_npy = |why: &str| Error::bad_input(format!("{name} is not a .npy file: {why}"));
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(not_npy("it does not start with the NumPy magic string"));
    }
    let (start, len) = match bytes[6] {
        1 => (10, u16::from_le_bytes([bytes[8], bytes[9]]) as usize),
        2 | 3 if bytes.len() >= 12 => (
            12,
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
        ),
        2 | 3 => return Err(not_npy("its header is truncated")),
        v => return Err(not_npy(&format!("format version {v} is not 1, 2 or 3"))),
    };
    if len > MAX_HEADER_BYTES {
        return Err(not_npy(&format!(
            "its header claims {len} bytes (at most {MAX_HEADER_BYTES} are accepted)"
        )));
    }
    Ok((start, len))
}

/// Parses the bytes of a `.npy` file (`name` names it in errors). Any bytes give a
/// result or a bad-input error, never a panic or an allocation the bytes do not justify.
pub fn parse_npy(bytes: &[u8], name: &str) -> Result<HostArray> {
    let (start, len) = prefix(bytes, name)?;
    if start + len > bytes.len() {
        return Err(Error::bad_input(format!(
            "{name} is not a .npy file: its header claims {len} bytes but the file holds {} after the prefix",
            bytes.len() - start
        )));
    }
    let header = npyz::NpyHeader::from_reader(&bytes[..start + len])
        .map_err(|e| Error::bad_input(format!("{name} is not a .npy file: {e}")))?;
    let data = &bytes[start + len..];
    let npy = npyz::NpyFile::with_header(header, data);
    if npy.order() != npyz::Order::C {
        return Err(Error::bad_input(format!(
            "{name} is in Fortran order; save it with np.ascontiguousarray first"
        )));
    }
    let dtype = dtype_of(&npy.dtype(), name)?;
    let shape = checked_shape(npy.shape(), data.len(), dtype, name)?;
    let corrupt =
        |e: std::io::Error| Error::bad_input(format!("{name}: cannot decode its data: {e}"));
    match dtype {
        DType::F32 => HostArray::from_f32(&shape, npy.into_vec::<f32>().map_err(corrupt)?),
        DType::I32 => HostArray::from_i32(&shape, npy.into_vec::<i32>().map_err(corrupt)?),
        DType::F16 => HostArray::from_f16(&shape, npy.into_vec::<half::f16>().map_err(corrupt)?),
        DType::BF16 => {
            let raw = npy.into_vec::<npyz::FixedSizeBytes<2>>().map_err(corrupt)?;
            let data = raw
                .into_iter()
                .map(|b| half::bf16::from_bits(u16::from_le_bytes(b.0)))
                .collect();
            HostArray::from_bf16(&shape, data)
        }
        DType::I8 => {
            let v = npy.into_vec::<i8>().map_err(corrupt)?;
            HostArray::from_words(
                DType::I8,
                &shape,
                v.into_iter().map(|x| x as i32 as u32).collect(),
            )
        }
        DType::U8 => {
            let v = npy.into_vec::<u8>().map_err(corrupt)?;
            HostArray::from_words(DType::U8, &shape, v.into_iter().map(u32::from).collect())
        }
        DType::Bool => {
            let v = npy.into_vec::<bool>().map_err(corrupt)?;
            HostArray::from_words(DType::Bool, &shape, v.into_iter().map(u32::from).collect())
        }
    }
}

/// The dtype tpusim holds for a `.npy` file's `descr` (`name` names it in errors).
fn dtype_of(descr_of: &npyz::DType, name: &str) -> Result<DType> {
    let descr = descr_of.descr();
    let kind = match descr_of {
        npyz::DType::Plain(ts) => Some((ts.type_char(), ts.size_field())),
        _ => None,
    };
    Ok(match kind {
        Some((npyz::TypeChar::Float, 4)) => DType::F32,
        Some((npyz::TypeChar::Int, 4)) => DType::I32,
        Some((npyz::TypeChar::Float, 2)) => DType::F16,
        // What numpy writes for ml_dtypes' bfloat16 (it has no bf16 of its own).
        Some((npyz::TypeChar::RawData, 2)) => DType::BF16,
        Some((npyz::TypeChar::Int, 1)) => DType::I8,
        Some((npyz::TypeChar::Uint, 1)) => DType::U8,
        Some((npyz::TypeChar::Bool, 1)) => DType::Bool,
        _ => {
            return Err(Error::bad_input(format!(
                "{name} holds dtype {descr}; tpusim reads float32 (<f4), int32 (<i4), float16 (<f2), ml_dtypes.bfloat16 (<V2), int8 (|i1), uint8 (|u1) and bool (|b1)"
            )))
        }
    })
}

/// The header's shape, if its element count fits in memory and matches the data bytes.
fn checked_shape(dims: &[u64], data: usize, dtype: DType, name: &str) -> Result<Vec<usize>> {
    let shape: Option<Vec<usize>> = dims.iter().map(|&d| usize::try_from(d).ok()).collect();
    let want = shape.as_ref().and_then(|s| {
        s.iter()
            .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
            .filter(|&b| b <= isize::MAX as usize)
    });
    match (shape, want) {
        (Some(s), Some(w)) if w == data => Ok(s),
        // (A stream is read one byte past its data at most: "more" is all it knows.)
        (Some(s), Some(w)) if data < w => Err(Error::bad_input(format!(
            "{name}: its header says shape {s:?} of {dtype} ({w} bytes of data) but the file holds {data} bytes of data: it is truncated"
        ))),
        (Some(s), Some(w)) => Err(Error::bad_input(format!(
            "{name}: its header says shape {s:?} of {dtype} ({w} bytes of data) but the file holds more bytes after them"
        ))),
        _ => Err(Error::bad_input(format!(
            "{name}: its header's shape {dims:?} has more elements than any memory holds"
        ))),
    }
}

/// Writes `a` as a `.npy` file (C order), whole or not at all (see [`crate::files`]).
pub fn write_npy(path: &Path, a: &HostArray) -> Result<()> {
    Output::check(path, "result")?.write_with(|w| write_to(w, a))
}

/// Writes `a` in `.npy` format to `w`.
pub fn write_to(w: &mut dyn std::io::Write, a: &HostArray) -> std::io::Result<()> {
    let shape: Vec<u64> = a.shape.iter().map(|&d| d as u64).collect();
    match a.dtype {
        DType::F32 => {
            let mut n = npyz::WriteOptions::<f32>::new()
                .default_dtype()
                .shape(&shape)
                .writer(w)
                .begin_nd()?;
            n.extend(a.as_f32().iter().copied())?;
            n.finish()
        }
        DType::I32 => {
            let mut n = npyz::WriteOptions::<i32>::new()
                .default_dtype()
                .shape(&shape)
                .writer(w)
                .begin_nd()?;
            n.extend(a.as_i32().iter().copied())?;
            n.finish()
        }
        DType::F16 => {
            let mut n = npyz::WriteOptions::<half::f16>::new()
                .default_dtype()
                .shape(&shape)
                .writer(w)
                .begin_nd()?;
            n.extend(a.halves().into_iter().map(half::f16::from_bits))?;
            n.finish()
        }
        DType::BF16 => {
            // ml_dtypes' convention: 2-byte void elements, little-endian bits; read back
            // with `np.load(f).view(ml_dtypes.bfloat16)`.
            let v2: npyz::TypeStr = "<V2".parse().expect("a valid type string");
            let mut n = npyz::WriteOptions::<npyz::FixedSizeBytes<2>>::new()
                .dtype(npyz::DType::Plain(v2))
                .shape(&shape)
                .writer(w)
                .begin_nd()?;
            n.extend(
                a.halves()
                    .into_iter()
                    .map(|h| npyz::FixedSizeBytes(h.to_le_bytes())),
            )?;
            n.finish()
        }
        DType::I8 => {
            let mut n = npyz::WriteOptions::<i8>::new()
                .default_dtype()
                .shape(&shape)
                .writer(w)
                .begin_nd()?;
            n.extend(a.words.iter().map(|&x| x as i8))?;
            n.finish()
        }
        DType::U8 => {
            let mut n = npyz::WriteOptions::<u8>::new()
                .default_dtype()
                .shape(&shape)
                .writer(w)
                .begin_nd()?;
            n.extend(a.words.iter().map(|&x| x as u8))?;
            n.finish()
        }
        DType::Bool => {
            let mut n = npyz::WriteOptions::<bool>::new()
                .default_dtype()
                .shape(&shape)
                .writer(w)
                .begin_nd()?;
            n.extend(a.words.iter().map(|&x| x != 0))?;
            n.finish()
        }
    }
}

/// Where a `.npy` file's elements lie: their dtype, the shape, and the offset of the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Element type.
    pub dtype: DType,
    /// Shape (C order).
    pub shape: Vec<usize>,
    /// Byte offset of the first element.
    pub data_at: u64,
}

/// The layout of the `.npy` file at `path` from its header alone (a rank reads its own
/// slices of the file with [`read_runs`]); the file's length must be what the header says.
pub fn read_layout(path: &Path) -> Result<Layout> {
    use std::io::Read;
    let name = path.display().to_string();
    let fail = |source| Error::File {
        action: "read input".into(),
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(fail)?;
    let length = f.metadata().map_err(fail)?.len();
    let mut bytes = Vec::new();
    (&mut f).take(12).read_to_end(&mut bytes).map_err(fail)?;
    let (start, len) = prefix(&bytes, &name)?;
    let left = (start + len).saturating_sub(bytes.len()) as u64;
    (&mut f).take(left).read_to_end(&mut bytes).map_err(fail)?;
    if bytes.len() < start + len {
        return Err(Error::bad_input(format!(
            "{name} is not a .npy file: its header claims {len} bytes but the file is shorter"
        )));
    }
    let header = npyz::NpyHeader::from_reader(&bytes[..start + len])
        .map_err(|e| Error::bad_input(format!("{name} is not a .npy file: {e}")))?;
    let npy = npyz::NpyFile::with_header(header, std::io::empty());
    if npy.order() != npyz::Order::C {
        return Err(Error::bad_input(format!(
            "{name} is in Fortran order; save it with np.ascontiguousarray first"
        )));
    }
    let dtype = dtype_of(&npy.dtype(), &name)?;
    let data = length.saturating_sub((start + len) as u64);
    let data = usize::try_from(data).unwrap_or(usize::MAX);
    let shape = checked_shape(npy.shape(), data, dtype, &name)?;
    Ok(Layout {
        dtype,
        shape,
        data_at: (start + len) as u64,
    })
}

/// The elements of the `.npy` file at `path` (of `layout`) in `runs` (first element,
/// count), one after another, as words.
pub fn read_runs(path: &Path, layout: &Layout, runs: &[(usize, usize)]) -> Result<Vec<u32>> {
    use std::os::unix::fs::FileExt;
    let fail = |source| Error::File {
        action: "read input".into(),
        path: path.to_path_buf(),
        source,
    };
    let f = std::fs::File::open(path).map_err(fail)?;
    let size = layout.dtype.size();
    let total = runs.iter().map(|r| r.1).sum::<usize>();
    let mut words = crate::device_sim::host_words(total, "the input's slices")?;
    let mut bytes = Vec::new();
    let mut at = 0;
    for &(first, n) in runs {
        bytes.resize(n * size, 0);
        f.read_exact_at(&mut bytes, layout.data_at + (first * size) as u64)
            .map_err(fail)?;
        layout
            .dtype
            .words_from_bytes(&bytes, &mut words[at..at + n]);
        at += n;
    }
    Ok(words)
}

/// The header of a `.npy` file of `dtype` and `shape` (C order), as [`write_to`] writes it.
pub fn header_bytes(dtype: DType, shape: &[usize]) -> Vec<u8> {
    let none = HostArray {
        dtype,
        shape: shape.to_vec(),
        words: Vec::new(),
    };
    let mut bytes = Vec::new();
    // The header is written first; with no elements after it the writer's count check
    // fails, and the header is what it leaves.
    let _ = write_to(&mut bytes, &none);
    bytes
}

/// Writes `words` (of `dtype`) into the `.npy` file `f` whose data begins at `data_at`,
/// at `runs` (first element, count), one after another.
pub fn write_runs(
    f: &std::fs::File,
    data_at: u64,
    dtype: DType,
    runs: &[(usize, usize)],
    words: &[u32],
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let size = dtype.size();
    let mut bytes = Vec::new();
    let mut at = 0;
    for &(first, n) in runs {
        bytes.resize(n * size, 0);
        dtype.bytes_from_words(&words[at..at + n], &mut bytes);
        f.write_all_at(&bytes, data_at + (first * size) as u64)?;
        at += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(text: &str) -> Vec<u8> {
        let mut v = b"\x93NUMPY\x01\x00".to_vec();
        v.extend((text.len() as u16).to_le_bytes());
        v.extend(text.as_bytes());
        v
    }

    #[test]
    fn a_stream_is_read_as_far_as_its_header_says_and_one_byte_more() {
        let text = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        let npy = [header(text), vec![0; 24]].concat();
        // The whole file: read to its end, and parsed.
        let whole = read_npy_bytes(&mut &npy[..], "a").unwrap();
        assert_eq!(whole, npy);
        assert_eq!(parse_npy(&whole, "a").unwrap().shape, [2, 3]);
        // Followed by bytes without end (`cat a.npy /dev/zero`): read_to_end would never
        // return; one byte past the data is read, and the file refused for it.
        let mut endless = std::io::Read::chain(&npy[..], std::io::repeat(0));
        let got = read_npy_bytes(&mut endless, "s").unwrap();
        assert_eq!(got.len(), npy.len() + 1);
        let e = parse_npy(&got, "s").unwrap_err().to_string();
        assert!(
            e.contains("(24 bytes of data) but the file holds more bytes after them"),
            "{e}"
        );
        // Bytes that cannot start one: twelve read, no more.
        let got = read_npy_bytes(&mut std::io::repeat(0), "z");
        assert!(got
            .unwrap_err()
            .to_string()
            .contains("z is not a .npy file"));
    }

    #[test]
    fn round_trips_both_dtypes() {
        let dir = tempfile::tempdir().unwrap();
        let f = HostArray::from_f32(&[2, 3], vec![0.5, -1.0, 2.25, 3.0, 4.0, 1e-3]).unwrap();
        let i = HostArray::from_i32(&[3, 1, 2], vec![1, -2, 3, -4, 5, i32::MAX]).unwrap();
        for (name, a) in [("f.npy", &f), ("i.npy", &i)] {
            let p = dir.path().join(name);
            write_npy(&p, a).unwrap();
            assert_eq!(&read_npy(&p).unwrap(), a);
        }
        // A float64 file is refused with its dtype named.
        let p = dir.path().join("d.npy");
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

    #[test]
    fn round_trips_16_bit_floats_as_numpy_and_ml_dtypes_write_them() {
        let vals = [0.5, -1.0, 2.25, 65504.0, 1e-7, -0.0];
        for (dtype, descr) in [(DType::F16, "<f2"), (DType::BF16, "<V2")] {
            let a = HostArray::from_values(dtype, &[3, 2], &vals).unwrap();
            let mut bytes = Vec::new();
            write_to(&mut bytes, &a).unwrap();
            let text = String::from_utf8_lossy(&bytes[10..40]).to_string();
            assert!(text.contains(descr), "{text}");
            assert_eq!(parse_npy(&bytes, "x").unwrap(), a);
        }
        // The bytes numpy writes for `np.array([1.5, 2, 3], dtype=ml_dtypes.bfloat16)`.
        let mut npy =
            header("{'descr': '<V2', 'fortran_order': False, 'shape': (3,), }             \n");
        npy.extend([0xc0, 0x3f, 0x00, 0x40, 0x40, 0x40]);
        let got = parse_npy(&npy, "x").unwrap();
        assert_eq!(
            (got.dtype, got.values()),
            (DType::BF16, vec![1.5, 2.0, 3.0])
        );
    }

    #[test]
    fn untrusted_headers_are_bad_input() {
        let shape = |s: &str| format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {s}, }}");
        for (bytes, why) in [
            (
                header(&shape("(4611686018427387904, 4611686018427387904)")),
                "more elements than any memory holds",
            ),
            (
                header(&shape("(18446744073709551615,)")),
                "more elements than any memory holds",
            ),
            (
                [header(&shape("(100000, 100000)")), vec![0; 512]].concat(),
                "it is truncated",
            ),
            (
                [header(&shape("(2,)")), vec![0; 12]].concat(),
                "(8 bytes of data) but the file holds more bytes after them",
            ),
            (
                b"\x93NUMPY\x02\x00\xf0\xff\xff\xff".to_vec(),
                "its header claims",
            ),
            (
                b"\x93NUMPY\x01\x00\xff\x00{".to_vec(),
                "its header claims 255 bytes",
            ),
            (b"\x93NUMPY\x09\x00\x00\x00".to_vec(), "format version 9"),
            (b"PK\x03\x04".to_vec(), "magic string"),
            (header(&"(".repeat(60000)), "is not a .npy file"),
        ] {
            let e = parse_npy(&bytes, "x.npy").unwrap_err();
            assert!(matches!(e, Error::BadInput(_)), "{e}");
            assert!(e.to_string().contains(why), "{why}: {e}");
        }
        let ok = [
            header(&shape("(2, 1)")),
            1f32.to_le_bytes().to_vec(),
            2f32.to_le_bytes().to_vec(),
        ]
        .concat();
        assert_eq!(parse_npy(&ok, "x").unwrap().as_f32(), &[1.0, 2.0]);
    }

    #[test]
    fn slices_of_a_file_are_its_elements_and_runs_write_them_back() {
        let dir = tempfile::tempdir().unwrap();
        for dtype in [DType::F32, DType::BF16, DType::I8, DType::Bool] {
            let values: Vec<f64> = (0..60).map(|i| (i % 2) as f64 * (i % 7) as f64).collect();
            let a = HostArray::from_values(dtype, &[3, 4, 5], &values).unwrap();
            let p = dir.path().join(format!("{dtype}.npy"));
            write_npy(&p, &a).unwrap();
            let layout = read_layout(&p).unwrap();
            assert_eq!((layout.dtype, &layout.shape[..]), (dtype, &[3, 4, 5][..]));
            let runs = [(5, 10), (40, 3), (0, 1)];
            let got = read_runs(&p, &layout, &runs).unwrap();
            let want: Vec<u32> = runs
                .iter()
                .flat_map(|&(f, n)| a.words[f..f + n].to_vec())
                .collect();
            assert_eq!(got, want);
            // The header and every element written at its place: the file write_to makes.
            let q = dir.path().join(format!("{dtype}-runs.npy"));
            let header = header_bytes(dtype, &a.shape);
            std::fs::write(&q, &header).unwrap();
            let f = std::fs::OpenOptions::new().write(true).open(&q).unwrap();
            write_runs(
                &f,
                header.len() as u64,
                dtype,
                &[(30, 30), (0, 30)],
                &[&a.words[30..], &a.words[..30]].concat(),
            )
            .unwrap();
            assert_eq!(std::fs::read(&q).unwrap(), std::fs::read(&p).unwrap());
        }
        let short = dir.path().join("short.npy");
        let whole = std::fs::read(dir.path().join("f32.npy")).unwrap();
        std::fs::write(&short, &whole[..whole.len() - 4]).unwrap();
        assert!(read_layout(&short)
            .unwrap_err()
            .to_string()
            .contains("truncated"));
    }
}
