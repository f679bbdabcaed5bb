//! Property tests of the parsers that take user input: shapes, permutations, schedule
//! specs, sizes, and `.npy` bytes. Any input gives a value or a bad-input error, never a
//! panic; what they accept round-trips.

use proptest::prelude::*;
use tpusim::array::parse_shape;
use tpusim::bench::parse_size;
use tpusim::collectives::{self, Options, Ppermute};
use tpusim::npy::{parse_npy, write_to};
use tpusim::sched::ScheduleSpec;
use tpusim::{DType, Error, HostArray, Mesh};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 128,
        // Failures print their minimal input; nothing is stored next to the sources.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn is_bad_input<T>(r: &tpusim::Result<T>) -> bool {
    matches!(r, Ok(_) | Err(Error::BadInput(_)))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn shapes_parse_or_explain(s in "\\PC{0,24}") {
        let r = parse_shape(&s);
        prop_assert!(is_bad_input(&r));
        if let Ok(dims) = r {
            prop_assert!(!dims.is_empty() && dims.iter().all(|&d| d > 0));
            let bytes = dims.iter().try_fold(4usize, |a, &d| a.checked_mul(d));
            prop_assert!(bytes.is_some_and(|b| b <= isize::MAX as usize));
        }
    }

    #[test]
    fn shapes_round_trip(dims in prop::collection::vec(1usize..100_000, 1..5), sep in "[xX,]") {
        let text = dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(&sep);
        let fits = dims.iter().try_fold(4usize, |a, &d| a.checked_mul(d)).is_some_and(|b| b <= isize::MAX as usize);
        match parse_shape(&text) {
            Ok(parsed) => prop_assert_eq!(parsed, dims),
            Err(e) => prop_assert!(!fits && e.to_string().contains("too large"), "{}", e),
        }
    }

    #[test]
    fn huge_shapes_are_refused(a in 1usize << 31.., b in 1usize << 31..) {
        let text = format!("{a}x{b}");
        prop_assert!(parse_shape(&text).is_err());
    }

    #[test]
    fn permutations_parse_or_explain(s in "[0-9:, a-z]{0,24}") {
        prop_assert!(is_bad_input(&Ppermute::parse_perm(&s)));
    }

    #[test]
    fn permutations_are_checked_against_the_mesh(
        pairs in prop::collection::vec((0usize..8, 0usize..8), 1..8),
        p in 1usize..8,
    ) {
        let text = pairs.iter().map(|(a, b)| format!("{a}:{b}")).collect::<Vec<_>>().join(",");
        let perm = Ppermute::parse_perm(&text).unwrap();
        prop_assert_eq!(&perm, &pairs);
        let valid = pairs.iter().all(|&(a, b)| a < p && b < p)
            && (0..pairs.len()).all(|i| pairs[..i].iter().all(|q| q.0 != pairs[i].0 && q.1 != pairs[i].1));
        let c = collectives::Registry::builtin().get("ppermute", &Options { perm: Some(perm), ..Options::default() }).unwrap();
        let r = c.call(&Mesh::new(p, "x").unwrap(), &[2, 2], DType::I32);
        prop_assert!(is_bad_input(&r));
        prop_assert_eq!(r.is_ok(), valid);
    }

    #[test]
    fn schedule_specs_parse_or_explain(s in "\\PC{0,20}", p in 1usize..10) {
        let r = ScheduleSpec::parse(&s);
        prop_assert!(is_bad_input(&r));
        if let Ok(spec) = r {
            prop_assert_eq!(ScheduleSpec::parse(&spec.to_string()).unwrap(), spec);
            prop_assert!(is_bad_input(&spec.validate(p)));
        }
    }

    #[test]
    fn schedule_specs_round_trip_and_name_a_device(d in 0usize..1000, seed: u64, p in 1usize..1000) {
        for spec in [ScheduleSpec::Eager, ScheduleSpec::Lazy, ScheduleSpec::Lockstep,
                     ScheduleSpec::RunAhead(d), ScheduleSpec::Random(seed)] {
            prop_assert_eq!(ScheduleSpec::parse(&spec.to_string()).unwrap(), spec);
        }
        prop_assert_eq!(ScheduleSpec::RunAhead(d).validate(p).is_ok(), d < p);
    }

    #[test]
    fn sizes_parse_or_explain(s in "\\PC{0,12}") {
        let r = parse_size(&s);
        prop_assert!(is_bad_input(&r));
        prop_assert!(r.map_or(true, |n| n > 0));
    }

    #[test]
    fn sizes_scale_by_their_suffix(n in 1u64.., k in 0usize..4) {
        let (suffix, mult) = [("", 1u64), ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)][k];
        let r = parse_size(&format!("{n}{suffix}"));
        match n.checked_mul(mult) {
            Some(v) => prop_assert_eq!(r.unwrap(), v),
            None => prop_assert!(r.is_err()),
        }
    }

    #[test]
    fn npy_bytes_parse_or_explain(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        prop_assert!(is_bad_input(&parse_npy(&bytes, "random.npy")));
    }

    #[test]
    fn npy_headers_parse_or_explain(text in "\\{'descr': '[<>|][fiu][1248]', 'fortran_order': (True|False), 'shape': \\(([0-9]{1,20}, ){0,3}\\), \\}", data in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((text.len() as u16).to_le_bytes());
        bytes.extend(text.as_bytes());
        bytes.extend(&data);
        let r = parse_npy(&bytes, "random.npy");
        prop_assert!(is_bad_input(&r));
        if let Ok(a) = r {
            prop_assert_eq!(a.len() * a.dtype.size(), data.len());
        }
    }

    #[test]
    fn npy_arrays_round_trip_and_any_truncation_is_refused(
        dims in prop::collection::vec(1usize..6, 1..4),
        dtype in prop::sample::select(DType::ALL.to_vec()),
        cut in any::<prop::sample::Index>(),
    ) {
        let n: usize = dims.iter().product();
        let values: Vec<f64> = (0..n).map(|v| v as f64 * 0.5 - 3.0).collect();
        let a = HostArray::from_values(dtype, &dims, &values).unwrap();
        let mut bytes = Vec::new();
        write_to(&mut bytes, &a).unwrap();
        prop_assert_eq!(&parse_npy(&bytes, "a.npy").unwrap(), &a);
        let short = &bytes[..cut.index(bytes.len())];
        prop_assert!(matches!(parse_npy(short, "a.npy"), Err(Error::BadInput(_))));
    }
}
