//! A run's data, device by device: deterministic random inputs, where every element of
//! every device's operand is drawn from its own place in a seeded stream (so any
//! device, or any range of its elements, is made alone with the bytes one process
//! makes), and the reference of an element-wise collective computed in chunks of
//! element positions. A rank of a partitioned run makes, holds and checks its own
//! devices' data, and never more than a chunk of another rank's.

use crate::array::{DType, HostArray};
use crate::budget::chunk_words;
use crate::collectives::reference::all_reduce_words;
use crate::collectives::Collective;
use crate::device_sim::host_words;
use crate::error::Result;
use crate::ir::Program;
use crate::mesh::Placement;
use rand::{RngCore, SeedableRng};
use std::ops::Range;

/// Elements `range` of operand `operand` of device `device`, in `dtype`, from `seed`
/// (see [`fill_words`]).
pub fn random_words(
    seed: u64,
    device: usize,
    operand: usize,
    dtype: DType,
    range: Range<usize>,
) -> Vec<u32> {
    let mut words = vec![0; range.len()];
    fill_words(seed, [device, operand], dtype, range.start, &mut words);
    words
}

/// `out` as elements `start..` of operand `at[1]` of device `at[0]`, in `dtype`, from
/// `seed`: one word of the stream of (device, operand) per element, mapped to floats
/// uniform in [0, 1) (rounded to the dtype), i32 uniform in [-1000, 1000) (exact under
/// sums), i8 in [-100, 100), u8 in [0, 200), bools either way.
pub fn fill_words(seed: u64, at: [usize; 2], dtype: DType, start: usize, out: &mut [u32]) {
    // Any range is made alone (the stream is indexed by word): large ones a part per core.
    const PART: usize = 1 << 18;
    if out.len() >= 4 * PART {
        use rayon::prelude::*;
        out.par_chunks_mut(PART)
            .enumerate()
            .for_each(|(i, part)| fill_range(seed, at, dtype, start + i * PART, part));
    } else {
        fill_range(seed, at, dtype, start, out);
    }
}

/// [`fill_words`] on one core: the stream's words in bulk (as `next_u32` gives them
/// one at a time), then each mapped to its dtype in a loop of its own (the compiler
/// vectorizes it; a word at a time with the dtype matched per element took half of
/// making a large input).
fn fill_range(seed: u64, at: [usize; 2], dtype: DType, start: usize, out: &mut [u32]) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(((at[0] as u64) << 16) | at[1] as u64);
    rng.set_word_pos(start as u128);
    rng.fill_bytes(bytemuck::cast_slice_mut(out));
    // A word scaled to [0, n) (Lemire's multiply: no rejection, so one word each).
    let below = |w: u32, n: u64| ((u64::from(w) * n) >> 32) as i64;
    let unit = |w: u32| (w >> 8) as f32 * (1.0 / (1u32 << 24) as f32);
    macro_rules! each {
        ($f:expr) => {
            for x in out.iter_mut() {
                // The stream's bytes are little-endian words.
                *x = $f(u32::from_le(*x));
            }
        };
    }
    match dtype {
        DType::F32 => each!(|w| unit(w).to_bits()),
        DType::I32 => each!(|w| (below(w, 2000) - 1000) as i32 as u32),
        DType::I8 => each!(|w| (below(w, 200) - 100) as i32 as u32),
        DType::U8 => each!(|w| below(w, 200) as u32),
        DType::Bool => each!(|w: u32| w >> 31),
        d => each!(|w| d.bits_of(f64::from(unit(w)))),
    }
}

/// Deterministic random inputs of the devices `held` of `program` (the others' empty),
/// as [`random_words`] makes them. A limit error when the host cannot hold them.
pub fn random_inputs_of(
    program: &Program,
    seed: u64,
    held: Range<usize>,
) -> Result<Vec<Vec<HostArray>>> {
    (0..program.devices)
        .map(|d| {
            if !held.contains(&d) {
                return Ok(Vec::new());
            }
            program
                .inputs
                .iter()
                .enumerate()
                .map(|(k, &a)| {
                    let alloc = &program.layout.allocs[a];
                    let mut words = host_words(alloc.numel(), &format!("input `{}`", alloc.name))?;
                    fill_words(seed, [d, k], alloc.dtype, 0, &mut words);
                    Ok(HostArray {
                        dtype: alloc.dtype,
                        shape: alloc.shape.clone(),
                        words,
                    })
                })
                .collect()
        })
        .collect()
}

/// Words `range` of device `d`'s operand 0, for a device another rank holds.
pub type Fetch<'a> = dyn Fn(usize, Range<usize>) -> Result<Vec<u32>> + 'a;

/// Device `d`'s operand 0 whole, where this process holds it.
pub type Kept<'a> = dyn Fn(usize) -> Option<&'a [u32]> + Sync + 'a;

/// The reference of element-wise collective `c` ([`Collective::elementwise`]) placed
/// by `place` at `devices` devices, for the devices `held` (the others' empty), from
/// the held devices' `inputs` (one operand each) and the others' words chunk by chunk
/// from `fetch`.
pub fn chunked_reference(
    c: &dyn Collective,
    place: &Placement,
    devices: usize,
    inputs: &[Vec<HostArray>],
    held: Range<usize>,
    fetch: &Fetch,
) -> Result<Vec<Vec<HostArray>>> {
    let first = &inputs[held.start][0];
    let (n, dtype) = (first.len(), first.dtype);
    let mut out: Vec<Vec<HostArray>> = (0..devices)
        .map(|d| {
            if !held.contains(&d) {
                return Ok(Vec::new());
            }
            Ok(vec![HostArray {
                dtype,
                shape: first.shape.clone(),
                words: host_words(n, "the reference")?,
            }])
        })
        .collect::<Result<_>>()?;
    let kept = |d: usize| inputs.get(d).and_then(|v| v.first()).map(|x| &x.words[..]);
    let block = Block::new(c, place, devices, dtype, &held);
    let step = chunk_words(devices);
    let mut scratch = Vec::new();
    for start in (0..n).step_by(step) {
        crate::interrupt::check()?;
        let range = start..(start + step).min(n);
        block.reference(&range, &kept, fetch, &mut scratch, &mut |d, want| {
            out[d][0].words[range.clone()].copy_from_slice(want);
        })?;
    }
    Ok(out)
}

/// Elements of the held devices' results (`got(d)`: device `d`'s only output, `n`
/// words of `dtype`) that differ from element-wise collective `c`'s reference within
/// `tolerance`, the reference made a block of positions at a time, blocks spread over
/// the cores, and never held whole; every device's input words where `kept` has them,
/// else from `fetch`.
#[allow(clippy::too_many_arguments)]
pub fn count_wrong_chunked<'g>(
    c: &dyn Collective,
    place: &Placement,
    devices: usize,
    n: usize,
    dtype: DType,
    held: Range<usize>,
    kept: &Kept,
    fetch: &(dyn Fn(usize, Range<usize>) -> Result<Vec<u32>> + Sync),
    got: &(dyn Fn(usize) -> &'g [u32] + Sync),
    tolerance: f32,
) -> Result<usize> {
    use rayon::prelude::*;
    // Small blocks: a block's inputs, reference and results stay in a core's cache.
    let step = (chunk_words(devices) / 64).max(1024);
    let block = Block::new(c, place, devices, dtype, &held);
    (0..n.div_ceil(step))
        .into_par_iter()
        // A reference block's words reused from block to block on each core.
        .map_init(Vec::new, |scratch, k| {
            crate::interrupt::check()?;
            let range = k * step..((k + 1) * step).min(n);
            let mut wrong = 0;
            block.reference(&range, kept, fetch, scratch, &mut |d, want| {
                wrong += dtype.count_mismatched_words(&got(d)[range.clone()], want, tolerance);
            })?;
            Ok(wrong)
        })
        .try_reduce(|| 0, |a, b| Ok(a + b))
}

/// How an element-wise collective's reference is made a block of positions at a time
/// for the devices a process holds.
struct Block<'c> {
    c: &'c dyn Collective,
    place: &'c Placement,
    devices: usize,
    dtype: DType,
    held: Range<usize>,
    /// The rings of an all-reduce ([`Collective::reduction`]) with a held device.
    rings: Vec<Vec<usize>>,
}

impl<'c> Block<'c> {
    fn new(
        c: &'c dyn Collective,
        place: &'c Placement,
        devices: usize,
        dtype: DType,
        held: &Range<usize>,
    ) -> Self {
        let rings = match &place.groups {
            Some(g) => g.to_vec(),
            None => vec![(0..devices).collect()],
        };
        Block {
            c,
            place,
            devices,
            dtype,
            held: held.clone(),
            rings: rings
                .into_iter()
                .filter(|r| r.iter().any(|d| held.contains(d)))
                .collect(),
        }
    }

    /// The reference at positions `range`, handed to `each(device, words)` for every
    /// held device. An all-reduce reduces the inputs where `kept` has them into
    /// `scratch`; any other collective's reference is made from copies of them.
    fn reference<'k>(
        &self,
        range: &Range<usize>,
        kept: &dyn Fn(usize) -> Option<&'k [u32]>,
        fetch: &Fetch,
        scratch: &mut Vec<u32>,
        each: &mut dyn FnMut(usize, &[u32]),
    ) -> Result<()> {
        let words = |d: usize| -> Result<std::borrow::Cow<'k, [u32]>> {
            Ok(match kept(d) {
                Some(x) => x[range.clone()].into(),
                None => fetch(d, range.clone())?.into(),
            })
        };
        let Some(op) = self.c.reduction() else {
            let chunk = (0..self.devices)
                .map(|d| {
                    Ok(vec![HostArray {
                        dtype: self.dtype,
                        shape: vec![range.len()],
                        words: words(d)?.into_owned(),
                    }])
                })
                .collect::<Result<Vec<_>>>()?;
            let want = self.place.per_group(&chunk, &|x| self.c.reference(x))?;
            for d in self.held.clone() {
                each(d, &want[d][0].words);
            }
            return Ok(());
        };
        scratch.resize(range.len(), 0);
        for ring in &self.rings {
            let srcs = ring.iter().map(|&d| words(d)).collect::<Result<Vec<_>>>()?;
            let srcs: Vec<&[u32]> = srcs.iter().map(|s| &s[..]).collect();
            all_reduce_words(&srcs, self.dtype, op, scratch);
            for &d in ring.iter().filter(|d| self.held.contains(d)) {
                each(d, scratch);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inputs made in bulk are the stream's words one at a time, mapped as the
    /// docs of [`fill_words`] say, in every dtype, from any start (mid-block too).
    #[test]
    fn inputs_made_in_bulk_are_the_streams_words_one_at_a_time() {
        for dtype in DType::ALL {
            for (start, len) in [(0, 1000), (7, 333), (1 << 20, 4 * (1 << 18) + 5)] {
                let got = random_words(9, 2, 1, dtype, start..start + len);
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
                rng.set_stream((2 << 16) | 1);
                rng.set_word_pos(start as u128);
                for (i, &g) in got.iter().enumerate() {
                    let w = rng.next_u32();
                    let unit = f64::from(w >> 8) / f64::from(1u32 << 24);
                    let want = match dtype {
                        DType::F32 => (unit as f32).to_bits(),
                        DType::I32 => (((u64::from(w) * 2000) >> 32) as i32 - 1000) as u32,
                        DType::I8 => (((u64::from(w) * 200) >> 32) as i32 - 100) as u32,
                        DType::U8 => ((u64::from(w) * 200) >> 32) as u32,
                        DType::Bool => w >> 31,
                        d => d.bits_of(unit),
                    };
                    assert_eq!(g, want, "{dtype} element {i} from {start}");
                }
            }
        }
    }

    /// The check by blocks counts exactly the elements made wrong, from kept inputs or
    /// from inputs made again, and lets through a difference within the tolerance.
    #[test]
    fn the_check_by_blocks_counts_the_elements_made_wrong() {
        use crate::collectives::Registry;
        use crate::mesh::Mesh;
        let psum = Registry::builtin().by_name("psum").unwrap();
        let (p, seed) = (4, 11);
        let place = Placement::whole(Mesh::new(p, "x").unwrap());
        // Several blocks, the last one short.
        let n = 5 * (chunk_words(p) / 16) + 777;
        let (mut inputs, dtype) = (Vec::new(), DType::F32);
        for d in 0..p {
            let words = random_words(seed, d, 0, dtype, 0..n);
            inputs.push(vec![HostArray {
                dtype,
                shape: vec![n],
                words,
            }]);
        }
        let fetch = |d, range| Ok(random_words(seed, d, 0, dtype, range));
        let want = chunked_reference(psum.as_ref(), &place, p, &inputs, 0..p, &fetch).unwrap();
        // The reference is the sum of the inputs, element by element, in f64.
        for i in [0, 1, n / 2, n - 1] {
            let sum: f64 = (0..p).map(|d| dtype.value_of(inputs[d][0].words[i])).sum();
            assert_eq!(want[1][0].words[i], dtype.bits_of(sum));
        }
        let mut got: Vec<Vec<u32>> = want.iter().map(|w| w[0].words.clone()).collect();
        let bad = [(0, 0), (1, 12345), (3, n - 1), (2, n / 3), (2, n / 3 + 1)];
        for &(d, i) in &bad {
            got[d][i] = (f32::from_bits(got[d][i]) + 0.5).to_bits();
        }
        // Off by one unit in the last place: within psum's tolerance.
        got[1][99] += 1;
        let all = |d: usize| Some(&inputs[d][0].words[..]);
        let some = |d: usize| d.is_multiple_of(2).then(|| &inputs[d][0].words[..]);
        let none = |_: usize| None;
        let tol = psum.tolerance();
        assert!(tol > 0.0);
        for kept in [&all as &Kept, &some, &none] {
            let wrong = count_wrong_chunked(
                psum.as_ref(),
                &place,
                p,
                n,
                dtype,
                0..p,
                kept,
                &fetch,
                &|d| &got[d][..],
                tol,
            )
            .unwrap();
            assert_eq!(wrong, bad.len());
            // A rank holding devices 1..3 checks theirs only.
            let mine = count_wrong_chunked(
                psum.as_ref(),
                &place,
                p,
                n,
                dtype,
                1..3,
                kept,
                &fetch,
                &|d| &got[d][..],
                tol,
            )
            .unwrap();
            assert_eq!(mine, 3);
        }
    }

    /// An all-reduce's reference made by blocks from the inputs where they lie is the
    /// whole reference, per ring (a mesh's groups along an axis), for every op and
    /// dtype; its check counts the same at any number of threads.
    #[test]
    fn an_all_reduce_by_blocks_is_its_whole_reference_at_any_thread_count() {
        use crate::collectives::{Options, Registry};
        use crate::ir::ReduceOp;
        use crate::mesh::Mesh;
        let reg = Registry::builtin();
        let mesh = Mesh::with_axes(&[("x", 2), ("y", 3)]).unwrap();
        let seed = 5;
        for place in [
            Placement::whole(mesh.clone()),
            Placement::along(mesh.clone(), "y").unwrap(),
        ] {
            for (name, op) in [
                ("psum", ReduceOp::Sum),
                ("psum", ReduceOp::Max),
                ("ring_allreduce", ReduceOp::Min),
            ] {
                let opts = Options { op, perm: None };
                let c = reg.get(name, &opts).unwrap();
                assert_eq!(c.reduction(), Some(op));
                for dtype in DType::COLLECTIVE {
                    let (p, n) = (6, 3 * 1024 + 17);
                    let inputs: Vec<Vec<HostArray>> = (0..p)
                        .map(|d| {
                            let words = random_words(seed, d, 0, dtype, 0..n);
                            vec![HostArray {
                                dtype,
                                shape: vec![n],
                                words,
                            }]
                        })
                        .collect();
                    let whole = place.per_group(&inputs, &|x| c.reference(x)).unwrap();
                    let fetch = |d, range| Ok(random_words(seed, d, 0, dtype, range));
                    for held in [0..p, 1..4] {
                        let by_blocks =
                            chunked_reference(c.as_ref(), &place, p, &inputs, held.clone(), &fetch)
                                .unwrap();
                        for d in held.clone() {
                            assert_eq!(by_blocks[d], whole[d], "{name} {op:?} {dtype} device {d}");
                        }
                    }
                    // Two elements of device 4 made wrong; none within the tolerance.
                    let mut got: Vec<Vec<u32>> = whole.iter().map(|w| w[0].words.clone()).collect();
                    got[4][0] ^= 1 << 14;
                    got[4][n - 1] ^= 1 << 14;
                    let kept = |d: usize| (d != 2).then(|| &inputs[d][0].words[..]);
                    let count = |threads| {
                        let pool = rayon::ThreadPoolBuilder::new()
                            .num_threads(threads)
                            .build()
                            .unwrap();
                        pool.install(|| {
                            count_wrong_chunked(
                                c.as_ref(),
                                &place,
                                p,
                                n,
                                dtype,
                                0..p,
                                &kept,
                                &fetch,
                                &|d| &got[d][..],
                                0.0,
                            )
                            .unwrap()
                        })
                    };
                    assert_eq!(count(1), 2, "{name} {op:?} {dtype}");
                    assert_eq!(count(3), 2, "{name} {op:?} {dtype}");
                }
            }
        }
    }

    #[test]
    fn a_large_range_made_a_part_per_core_is_the_words_made_on_one() {
        let n = (1 << 20) + 77;
        for dtype in [DType::F32, DType::BF16, DType::I8] {
            let (mut split, mut one) = (vec![0; n], vec![0; n]);
            fill_words(9, [2, 1], dtype, 333, &mut split);
            fill_range(9, [2, 1], dtype, 333, &mut one);
            assert!(split == one, "{dtype}");
        }
    }

    #[test]
    fn a_range_of_elements_is_the_same_words_as_the_whole() {
        for dtype in DType::ALL {
            let whole = random_words(7, 3, 1, dtype, 0..5000);
            assert_eq!(random_words(7, 3, 1, dtype, 1234..4321), whole[1234..4321]);
            assert_ne!(random_words(7, 2, 1, dtype, 0..5000), whole, "{dtype}");
            assert_ne!(random_words(8, 3, 1, dtype, 0..5000), whole, "{dtype}");
        }
        let ints = random_words(0, 0, 0, DType::I32, 0..10000);
        let v: Vec<i32> = ints.iter().map(|&w| w as i32).collect();
        assert!(v.iter().all(|x| (-1000..1000).contains(x)));
        assert!(v.contains(&-1000) && v.contains(&999));
        let floats = random_words(0, 0, 0, DType::F32, 0..10000);
        assert!(floats
            .iter()
            .all(|&w| (0.0..1.0).contains(&f32::from_bits(w))));
    }
}
