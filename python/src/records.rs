//! Reads a kernel recording (`[device][grid point][record]`, each record a dict made by
//! `tpusim/_jaxpr.py`) into [`Op`]s by walking the Python objects directly: a long
//! loop's recording is a few hundred thousand dicts, and a generic deserializer
//! (`pythonize` into `#[serde(tag = "op")]`) buffers each of them before reading it.
//! It reads what the serde derives of [`crate::replay`] read, and says where a record is
//! malformed ([`check_reader`] compares the two).

use std::collections::HashMap;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyList, PyString, PyTuple, PyType};
use tpusim::kernel::SourceLoc;
use tpusim::{Error, Result};

use crate::replay::{
    Dev, ErrorKind, KindRec, Loc, Op, Recording, Reduce, RefPath, SemPath, SemSrc, Side, Window,
};

/// What went wrong in a record, before the reader says which record it was.
type Field<T> = std::result::Result<T, String>;

/// Reads a whole recording (every device, every grid point).
pub fn read_recording(obj: &Bound<'_, PyAny>) -> Result<Recording> {
    let mut r = Reader::new(obj.py());
    let mut devices = Vec::new();
    each(obj, |d, dev| {
        let mut points = Vec::new();
        each(&dev, |g, point| {
            points.push(r.ops(&point, Some((d, g)))?);
            Ok(())
        })
        .map_err(|e| format!("device {d}: {e}"))?;
        devices.push(points);
        Ok(())
    })
    .map_err(malformed)?;
    Ok(devices)
}

/// Reads one grid point's records.
pub fn read_ops(obj: &Bound<'_, PyAny>) -> Result<Vec<Op>> {
    Reader::new(obj.py()).ops(obj, None).map_err(malformed)
}

fn malformed(e: String) -> Error {
    Error::bad_input(format!("malformed kernel recording: {e}"))
}

/// The reader's memory of one recording: source lines by the Python file-name object
/// and line (the front end passes the same few `str` objects, alive while it reads).
struct Reader {
    locs: HashMap<(usize, u32), SourceLoc>,
    /// `_batch.PerIter` and `_batch.Copies` (None: the front end has none loaded, and no
    /// recording holds one).
    batch: Option<(Py<PyType>, Py<PyType>)>,
}

/// The iteration a [`Copies`](Reader::copies) record is read at: its PerIter fields'
/// value there.
type At = Option<usize>;

impl Reader {
    fn new(py: Python<'_>) -> Self {
        // Only a recording the front end made holds its classes, and it imported them.
        let batch = py
            .import("sys")
            .and_then(|sys| sys.getattr("modules"))
            .and_then(|m| m.get_item("tpusim._batch"))
            .and_then(|b| {
                let t = |name: &str| -> PyResult<Py<PyType>> {
                    Ok(b.getattr(name)?.cast_into::<PyType>()?.unbind())
                };
                Ok((t("PerIter")?, t("Copies")?))
            })
            .ok();
        Reader {
            locs: HashMap::new(),
            batch,
        }
    }

    fn ops(&mut self, obj: &Bound<'_, PyAny>, at: Option<(usize, usize)>) -> Field<Vec<Op>> {
        let point = at.map(|(_, g)| format!("grid point {g}"));
        let mut ops = Vec::new();
        let mut failed = false;
        each(obj, |k, rec| {
            let read = if self.is_copies(&rec) {
                self.copies(&rec, &mut ops)
            } else {
                self.op(&rec, None).map(|op| ops.push(op))
            };
            read.map_err(|e| {
                failed = true;
                let kind = rec
                    .cast::<PyDict>()
                    .ok()
                    .and_then(|d| d.get_item("op").ok().flatten())
                    .and_then(|o| o.extract::<String>().ok())
                    .map(|o| format!(" (`{o}`)"))
                    .unwrap_or_default();
                match &point {
                    Some(p) => format!("{p}, record {k}{kind}: {e}"),
                    None => format!("record {k}{kind}: {e}"),
                }
            })
        })
        .map_err(|e| match (&point, failed) {
            // Not a list at all: say which grid point.
            (Some(p), false) => format!("{p}: {e}"),
            _ => e,
        })?;
        Ok(ops)
    }

    /// Record `rec`, its PerIter fields read at iteration `it`.
    fn op<'py>(&mut self, rec: &Bound<'py, PyAny>, it: At) -> Field<Op> {
        let py = rec.py();
        let d = rec
            .cast::<PyDict>()
            .map_err(|_| format!("expected a dict, got {}", type_name(rec)))?;
        let per_iter = self.batch.as_ref().map(|(p, _)| p.bind(py).clone());
        let at_it = |v: Bound<'py, PyAny>| -> Field<Bound<'py, PyAny>> {
            match &per_iter {
                Some(p) if v.get_type().is(p) => value_at(&v, it),
                _ => Ok(v),
            }
        };
        let f = |key: &Bound<'py, PyString>| -> Field<Bound<'py, PyAny>> {
            let v = d.get_item(key).map_err(|e| e.to_string())?;
            let v = v.ok_or_else(|| format!("missing field `{key}`"))?;
            at_it(v).map_err(|e| format!("field `{key}`: {e}"))
        };
        // An optional field: absent and None are the same.
        let opt = |key: &Bound<'py, PyString>| -> Field<Option<Bound<'py, PyAny>>> {
            let v = d.get_item(key).map_err(|e| e.to_string())?;
            let Some(v) = v else { return Ok(None) };
            let v = at_it(v).map_err(|e| format!("field `{key}`: {e}"))?;
            Ok((!v.is_none()).then_some(v))
        };
        let name = f(intern!(py, "op"))?;
        let name = name
            .cast::<PyString>()
            .map_err(|_| format!("field `op`: expected a string, got {}", type_name(&name)))?;
        let name = name.to_str().map_err(|e| e.to_string())?;
        macro_rules! get {
            ($key:literal, $read:expr) => {{
                let v = f(intern!(py, $key))?;
                $read(&v).map_err(|e: String| format!("field `{}`: {e}", $key))?
            }};
        }
        macro_rules! get_opt {
            ($key:literal, $read:expr) => {{
                match opt(intern!(py, $key))? {
                    Some(v) => {
                        Some($read(&v).map_err(|e: String| format!("field `{}`: {e}", $key))?)
                    }
                    None => None,
                }
            }};
        }
        let at = |r: &mut Self| -> Field<Loc> {
            let v = f(intern!(py, "at"))?;
            r.loc(&v).map_err(|e| format!("field `at`: {e}"))
        };
        Ok(match name {
            "local_copy" => Op::LocalCopy {
                id: get!("id", usize_of),
                src: get!("src", ref_path),
                dst: get!("dst", ref_path),
                sem: get!("sem", sem_path),
                at: at(self)?,
            },
            "remote_copy" => Op::RemoteCopy {
                id: get!("id", usize_of),
                src: get!("src", ref_path),
                dst: get!("dst", ref_path),
                send_sem: get!("send_sem", sem_path),
                recv_sem: get!("recv_sem", sem_path),
                dev: get!("dev", dev),
                at: at(self)?,
            },
            "start" => Op::Start {
                id: get!("id", usize_of),
                at: at(self)?,
            },
            "wait" => Op::Wait {
                id: get!("id", usize_of),
                at: at(self)?,
            },
            "wait_send" => Op::WaitSend {
                id: get!("id", usize_of),
                at: at(self)?,
            },
            "wait_recv" => Op::WaitRecv {
                id: get!("id", usize_of),
                at: at(self)?,
            },
            "signal" => Op::Signal {
                sem: get!("sem", sem_path),
                inc: get!("inc", i64_of),
                dev: get_opt!("dev", dev),
                at: at(self)?,
            },
            "sem_wait" => Op::SemWait {
                sem: get!("sem", sem_path),
                value: get!("value", i64_of),
                at: at(self)?,
            },
            "sem_read" => Op::SemRead {
                sem: get!("sem", sem_path),
                dst: get!("dst", ref_path),
                at: at(self)?,
            },
            "fill" => Op::Fill {
                dst: get!("dst", ref_path),
                value: get!("value", f64_of),
                at: at(self)?,
            },
            "copy" => Op::Copy {
                dst: get!("dst", ref_path),
                src: get!("src", ref_path),
                at: at(self)?,
            },
            "accumulate" => Op::Accumulate {
                dst: get!("dst", ref_path),
                src: get!("src", ref_path),
                reduce: get!("reduce", reduce),
                at: at(self)?,
            },
            "barrier" => Op::Barrier { at: at(self)? },
            "load" => Op::Load {
                id: get!("id", usize_of),
                src: get!("src", ref_path),
                window: get_opt!("window", window),
                at: at(self)?,
            },
            "full" => Op::Full {
                id: get!("id", usize_of),
                shape: get!("shape", usizes),
                value: get!("value", f64_of),
                dtype: get!("dtype", string),
                at: at(self)?,
            },
            "const" => Op::Const {
                id: get!("id", usize_of),
                data: get!("data", usize_of),
                shape: get!("shape", usizes),
                dtype: get!("dtype", string),
                at: at(self)?,
            },
            "compute" => Op::Compute {
                id: get!("id", usize_of),
                kind: get!("kind", kind_rec),
                args: get!("args", usizes),
                shape: get!("shape", usizes),
                dtype: get!("dtype", string),
                at: at(self)?,
            },
            "store" => Op::Store {
                dst: get!("dst", ref_path),
                src: get!("src", usize_of),
                start: get_opt!("start", usizes),
                at: at(self)?,
            },
            "dma_wait" => Op::DmaWait {
                sem: get!("sem", sem_path),
                bytes: get!("bytes", u64_of),
                side: get!("side", side),
                at: at(self)?,
            },
            "read" => Op::Read {
                value: get_opt!("value", usize_of),
                src: get_opt!("src", ref_path),
                fetch: get_opt!("fetch", ref_path),
                at: at(self)?,
            },
            "iter" => {
                let v = f(intern!(py, "loops"))?;
                let mut loops = Vec::new();
                each(&v, |_, l| {
                    let (site, n) = pair(&l)?;
                    loops.push((self.loc(&site)?, u32_of(&at_it(n)?)?));
                    Ok(())
                })
                .map_err(|e| format!("field `loops`: {e}"))?;
                Op::Iter { loops }
            }
            "mark" => Op::Mark {
                label: get!("label", string),
                at: at(self)?,
            },
            "error" => Op::Error {
                kind: get!("kind", error_kind),
                what: get!("what", string),
                detail: get!("detail", string),
                at: at(self)?,
            },
            other => return Err(format!("unknown record `{other}`")),
        })
    }

    fn is_copies(&self, v: &Bound<'_, PyAny>) -> bool {
        let py = v.py();
        matches!(&self.batch, Some((_, c)) if v.get_type().is(c.bind(py)))
    }

    /// Whether a body record holds a PerIter field (or is an `iter` record, whose
    /// iteration counts are).
    fn varies(&self, rec: &Bound<'_, PyAny>) -> bool {
        let py = rec.py();
        let Some((p, _)) = &self.batch else {
            return false;
        };
        let Ok(d) = rec.cast::<PyDict>() else {
            return false; // `op` says what is wrong with it
        };
        let iter = d
            .get_item(intern!(py, "op"))
            .ok()
            .flatten()
            .is_some_and(|o| o.eq("iter").unwrap_or(false));
        iter || d.values().iter().any(|v| v.get_type().is(p.bind(py)))
    }

    /// A `_batch.Copies`: its body records' copies at its first `n` iterations, each
    /// value id from `base` on shifted by `j * by` at iteration `j`, each DMA descriptor
    /// id from `dbase` on by `j * dby`, and each PerIter field its value at `j` (what
    /// `Template.instance` makes; the front end's copies of a long loop were most of a
    /// first call's recording). A body record holding no PerIter is read once.
    fn copies(&mut self, obj: &Bound<'_, PyAny>, out: &mut Vec<Op>) -> Field<()> {
        let py = obj.py();
        let attr = |name: &Bound<'_, PyString>| -> Field<usize> {
            let v = obj.getattr(name).map_err(|e| e.to_string())?;
            usize_of(&v).map_err(|e| format!("loop copies' `{name}`: {e}"))
        };
        let n = attr(intern!(py, "n"))?;
        let shift = Shift {
            base: attr(intern!(py, "base"))?,
            by: attr(intern!(py, "by"))?,
            dbase: attr(intern!(py, "dbase"))?,
            dby: attr(intern!(py, "dby"))?,
        };
        let records = obj
            .getattr(intern!(py, "records"))
            .map_err(|e| e.to_string())?;
        let mut body = Vec::new();
        each(&records, |k, rec| {
            let varies = self.varies(&rec);
            let op = self
                .op(&rec, Some(0))
                .map_err(|e| format!("loop body record {k}: {e}"))?;
            body.push((op, varies.then_some(rec)));
            Ok(())
        })?;
        out.reserve(n * body.len());
        for j in 0..n {
            for (k, (op, rec)) in body.iter().enumerate() {
                let mut op = match rec {
                    Some(rec) if j > 0 => self
                        .op(rec, Some(j))
                        .map_err(|e| format!("loop body record {k}, copy {j}: {e}"))?,
                    _ => op.clone(),
                };
                shift.apply(&mut op, j);
                out.push(op);
            }
        }
        Ok(())
    }

    /// `[file, line]`, interned once per distinct pair.
    fn loc(&mut self, v: &Bound<'_, PyAny>) -> Field<Loc> {
        let (file, line) = pair(v)?;
        let line = u32_of(&line)?;
        let file = file
            .cast::<PyString>()
            .map_err(|_| format!("expected a file name, got {}", type_name(&file)))?;
        let key = (file.as_ptr() as usize, line);
        if let Some(l) = self.locs.get(&key) {
            return Ok(Loc(*l));
        }
        let l = SourceLoc::intern(file.to_str().map_err(|e| e.to_string())?, line);
        // Keyed by the object's address: kept alive by the recording while it is read.
        self.locs.insert(key, l);
        Ok(Loc(l))
    }
}

/// How a loop body's ids move from one iteration's copy to the next (`_batch.Copies`).
struct Shift {
    base: usize,
    by: usize,
    dbase: usize,
    dby: usize,
}

impl Shift {
    /// `op` as iteration `j`'s copy: its body's own value and descriptor ids moved.
    fn apply(&self, op: &mut Op, j: usize) {
        let moved = |x: &mut usize, base: usize, by: usize| {
            if *x >= base {
                *x += j * by;
            }
        };
        let value = |x: &mut usize| moved(x, self.base, self.by);
        match op {
            Op::Compute { id, args, .. } => {
                value(id);
                args.iter_mut().for_each(value);
            }
            Op::Load { id, .. } | Op::Const { id, .. } | Op::Full { id, .. } => value(id),
            Op::Store { src, .. } => value(src),
            Op::LocalCopy { id, .. }
            | Op::RemoteCopy { id, .. }
            | Op::Start { id, .. }
            | Op::Wait { id, .. }
            | Op::WaitSend { id, .. }
            | Op::WaitRecv { id, .. } => moved(id, self.dbase, self.dby),
            _ => {}
        }
    }
}

/// A PerIter's value at iteration `it`.
fn value_at<'py>(v: &Bound<'py, PyAny>, it: At) -> Field<Bound<'py, PyAny>> {
    let Some(j) = it else {
        return Err("a per-iteration value outside a loop's copies".into());
    };
    let vals = v
        .getattr(intern!(v.py(), "vals"))
        .map_err(|e| e.to_string())?;
    vals.get_item(j)
        .map_err(|_| format!("no per-iteration value for iteration {j}"))
}

/// Calls `f` with each item of a list or tuple, and its position.
fn each<'py>(
    v: &Bound<'py, PyAny>,
    mut f: impl FnMut(usize, Bound<'py, PyAny>) -> Field<()>,
) -> Field<()> {
    if let Ok(l) = v.cast::<PyList>() {
        for (i, x) in l.iter().enumerate() {
            f(i, x)?;
        }
        return Ok(());
    }
    if let Ok(t) = v.cast::<PyTuple>() {
        for (i, x) in t.iter().enumerate() {
            f(i, x)?;
        }
        return Ok(());
    }
    Err(format!("expected a list, got {}", type_name(v)))
}

/// The two items of a list or tuple of length two.
fn pair<'py>(v: &Bound<'py, PyAny>) -> Field<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let mut items: [Option<Bound<'py, PyAny>>; 2] = [None, None];
    let mut n = 0;
    each(v, |i, x| {
        if i < 2 {
            items[i] = Some(x);
        }
        n = i + 1;
        Ok(())
    })?;
    match (n, items) {
        (2, [Some(a), Some(b)]) => Ok((a, b)),
        _ => Err(format!("expected a list of 2 items, got {n}")),
    }
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "an object".into())
}

/// An integer of type `T` (Python ints, numpy integers: anything with `__index__`).
fn int_of<T>(v: &Bound<'_, PyAny>, what: &str) -> Field<T>
where
    T: for<'a, 'py> FromPyObject<'a, 'py>,
{
    // Python's bools are ints, and floats have `__index__`-less `__int__`: neither is one.
    if v.is_instance_of::<PyBool>()
        || v.is_instance_of::<PyFloat>()
        || v.is_instance_of::<PyString>()
    {
        return Err(format!("expected {what}, got {}", type_name(v)));
    }
    v.extract::<T>().map_err(|_| {
        format!(
            "expected {what}, got {}",
            v.repr().map_or_else(|_| type_name(v), |r| r.to_string())
        )
    })
}

fn usize_of(v: &Bound<'_, PyAny>) -> Field<usize> {
    int_of(v, "a non-negative integer")
}

fn u32_of(v: &Bound<'_, PyAny>) -> Field<u32> {
    int_of(v, "a non-negative 32-bit integer")
}

fn u64_of(v: &Bound<'_, PyAny>) -> Field<u64> {
    int_of(v, "a non-negative integer")
}

fn i64_of(v: &Bound<'_, PyAny>) -> Field<i64> {
    int_of(v, "an integer")
}

fn f64_of(v: &Bound<'_, PyAny>) -> Field<f64> {
    if v.is_instance_of::<PyBool>() || v.is_instance_of::<PyString>() {
        return Err(format!("expected a number, got {}", type_name(v)));
    }
    v.extract::<f64>()
        .map_err(|_| format!("expected a number, got {}", type_name(v)))
}

fn string(v: &Bound<'_, PyAny>) -> Field<String> {
    let s = v
        .cast::<PyString>()
        .map_err(|_| format!("expected a string, got {}", type_name(v)))?;
    Ok(s.to_str().map_err(|e| e.to_string())?.to_owned())
}

fn usizes(v: &Bound<'_, PyAny>) -> Field<Vec<usize>> {
    let mut out = Vec::new();
    each(v, |i, x| {
        out.push(usize_of(&x).map_err(|e| format!("item {i}: {e}"))?);
        Ok(())
    })?;
    Ok(out)
}

/// `[position, [[kind, a, b], ...]]`.
fn ref_path(v: &Bound<'_, PyAny>) -> Field<RefPath> {
    let (pos, steps) = pair(v)?;
    let pos = usize_of(&pos).map_err(|e| format!("position: {e}"))?;
    let mut out = Vec::new();
    each(&steps, |i, s| {
        let mut step = (0u8, 0i64, 0i64);
        let mut n = 0;
        each(&s, |j, x| {
            match j {
                0 => step.0 = int_of(&x, "a step kind (0-255)")?,
                1 => step.1 = i64_of(&x)?,
                2 => step.2 = i64_of(&x)?,
                _ => {}
            }
            n = j + 1;
            Ok(())
        })
        .map_err(|e| format!("step {i}: {e}"))?;
        if n != 3 {
            return Err(format!("step {i}: expected a list of 3 items, got {n}"));
        }
        out.push(step);
        Ok(())
    })?;
    Ok(RefPath(pos, out))
}

/// `[{"Arg": i} | {"Barrier": i}, index or None]`.
fn sem_path(v: &Bound<'_, PyAny>) -> Field<SemPath> {
    let (src, index) = pair(v)?;
    let (variant, value) = variant(&src)?;
    let i = usize_of(&value).map_err(|e| format!("`{variant}`: {e}"))?;
    let src = match variant.as_str() {
        "Arg" => SemSrc::Arg(i),
        "Barrier" => SemSrc::Barrier(i),
        _ => return Err(format!("unknown semaphore source `{variant}`")),
    };
    let index = if index.is_none() {
        None
    } else {
        Some(i64_of(&index).map_err(|e| format!("index: {e}"))?)
    };
    Ok(SemPath(src, index))
}

/// The one `{name: value}` entry of a dict (an enum variant with its value).
fn variant<'py>(v: &Bound<'py, PyAny>) -> Field<(String, Bound<'py, PyAny>)> {
    let d = v
        .cast::<PyDict>()
        .map_err(|_| format!("expected a dict of one entry, got {}", type_name(v)))?;
    if d.len() != 1 {
        return Err(format!(
            "expected a dict of one entry, got {} entries",
            d.len()
        ));
    }
    let (k, value) = d.iter().next().expect("one entry");
    Ok((string(&k)?, value))
}

/// `{"Mesh": [coordinates]}` or `{"Logical": id}`.
fn dev(v: &Bound<'_, PyAny>) -> Field<Dev> {
    let (variant, value) = variant(v)?;
    match variant.as_str() {
        "Mesh" => {
            let mut c = Vec::new();
            each(&value, |i, x| {
                c.push(i64_of(&x).map_err(|e| format!("`Mesh` item {i}: {e}"))?);
                Ok(())
            })?;
            Ok(Dev::Mesh(c))
        }
        "Logical" => Ok(Dev::Logical(
            i64_of(&value).map_err(|e| format!("`Logical`: {e}"))?,
        )),
        _ => Err(format!("unknown device id kind `{variant}`")),
    }
}

fn reduce(v: &Bound<'_, PyAny>) -> Field<Reduce> {
    match string(v)?.as_str() {
        "sum" => Ok(Reduce::Sum),
        "max" => Ok(Reduce::Max),
        "min" => Ok(Reduce::Min),
        other => Err(format!("unknown reduction `{other}`")),
    }
}

fn side(v: &Bound<'_, PyAny>) -> Field<Side> {
    match string(v)?.as_str() {
        "local" => Ok(Side::Local),
        "send" => Ok(Side::Send),
        "recv" => Ok(Side::Recv),
        other => Err(format!("unknown DMA side `{other}`")),
    }
}

fn error_kind(v: &Bound<'_, PyAny>) -> Field<ErrorKind> {
    match string(v)?.as_str() {
        "out_of_bounds" => Ok(ErrorKind::OutOfBounds),
        "device_id_out_of_range" => Ok(ErrorKind::DeviceIdOutOfRange),
        "misuse" => Ok(ErrorKind::Misuse),
        "shape_mismatch" => Ok(ErrorKind::ShapeMismatch),
        other => Err(format!("unknown error kind `{other}`")),
    }
}

/// `{"start": [...], "shape": [...], "strides": [...]}`.
fn window(v: &Bound<'_, PyAny>) -> Field<Window> {
    let d = v
        .cast::<PyDict>()
        .map_err(|_| format!("expected a dict, got {}", type_name(v)))?;
    let py = v.py();
    let list = |key: &Bound<'_, PyString>| -> Field<Vec<usize>> {
        let x = d
            .get_item(key)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("missing field `{key}`"))?;
        usizes(&x).map_err(|e| format!("field `{key}`: {e}"))
    };
    Ok(Window {
        start: list(intern!(py, "start"))?,
        shape: list(intern!(py, "shape"))?,
        strides: list(intern!(py, "strides"))?,
    })
}

/// A compute op's kind: `k` and whichever parameters it has (the rest default).
fn kind_rec<'py>(v: &Bound<'py, PyAny>) -> Field<KindRec> {
    let d = v
        .cast::<PyDict>()
        .map_err(|_| format!("expected a dict, got {}", type_name(v)))?;
    let py = v.py();
    let get = |key: &Bound<'py, PyString>| -> Field<Option<Bound<'py, PyAny>>> {
        d.get_item(key).map_err(|e| e.to_string())
    };
    macro_rules! or_default {
        ($key:literal, $read:expr) => {
            match get(intern!(py, $key))? {
                Some(x) => $read(&x).map_err(|e: String| format!("field `{}`: {e}", $key))?,
                None => Default::default(),
            }
        };
    }
    let k = match get(intern!(py, "k"))? {
        Some(x) => string(&x).map_err(|e| format!("field `k`: {e}"))?,
        None => return Err("missing field `k`".into()),
    };
    Ok(KindRec {
        k,
        op: or_default!("op", string),
        n: or_default!("n", |x: &Bound<'_, PyAny>| int_of::<i32>(
            x,
            "a 32-bit integer"
        )),
        dims: or_default!("dims", usizes),
        dim: or_default!("dim", usize_of),
        start: or_default!("start", usizes),
        strides: or_default!("strides", usizes),
        lhs_contract: or_default!("lhs_contract", usizes),
        rhs_contract: or_default!("rhs_contract", usizes),
        lhs_batch: or_default!("lhs_batch", usizes),
        rhs_batch: or_default!("rhs_batch", usizes),
    })
}

/// For the tests: the recording `obj` as this reader reads it and as the serde derives
/// read it (the reader's reference), each its `Debug` text or its error. The serde
/// derives read `expanded` where given: `obj` with its loop copies made in Python
/// (`_batch.expand`), which they do not know.
#[pyfunction]
#[pyo3(signature = (obj, expanded=None))]
pub fn _read_recording_both(
    obj: &Bound<'_, PyAny>,
    expanded: Option<&Bound<'_, PyAny>>,
) -> (String, String) {
    let text = |r: Result<Recording>| match r {
        Ok(rec) => format!("{rec:?}"),
        Err(e) => format!("error: {e}"),
    };
    (
        text(read_recording(obj)),
        text(crate::replay::read_recording_serde(expanded.unwrap_or(obj))),
    )
}
