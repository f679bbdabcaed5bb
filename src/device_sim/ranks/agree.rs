//! Ranks agree before they run: each rank's command line in canonical form (the build,
//! the command, every argument with its value or default) is hashed and the hashes
//! all-gathered; where they differ, the canonical forms are exchanged and every rank
//! names the same difference. Ranks started differently would otherwise plan different
//! schedules and wait for messages that never come, or check each against its own
//! reference and pass wrongly.

use super::Ranks;
use crate::error::{Error, Result};

/// One field of a canonical command line: a name (`build`, `command`, `--op`) and its value.
pub type Field = (String, String);

/// The field naming the command: where it differs, it is the only difference named.
pub const COMMAND: &str = "the command";

/// The most differences a refusal lists.
const SHOWN: usize = 4;

/// FNV-1a over `bytes`: a stable hash (the same on every build and host).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `fields` as bytes (JSON: a list of pairs).
fn encode(fields: &[Field]) -> Vec<u8> {
    serde_json::to_vec(fields).unwrap_or_default()
}

/// What differs between the ranks' `fields` (rank order), as one sentence; `None` when
/// every rank has the same. Each field's value is compared with rank 0's.
pub fn difference(all: &[Vec<Field>]) -> Option<String> {
    let first = all.first()?;
    let value = |fields: &[Field], name: &str| -> String {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map_or_else(|| "(not given)".to_string(), |(_, v)| v.clone())
    };
    // Every field name, rank 0's first, then those only other ranks have.
    let mut names: Vec<&str> = Vec::new();
    for fields in all {
        for (n, _) in fields {
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
    }
    // Different commands take different arguments: then the command is the difference.
    if all
        .iter()
        .any(|f| value(f, COMMAND) != value(first, COMMAND))
    {
        names.retain(|n| *n == COMMAND);
    }
    let mut found = Vec::new();
    for name in names {
        let mine = value(first, name);
        if let Some((r, theirs)) = all
            .iter()
            .enumerate()
            .skip(1)
            .map(|(r, f)| (r, value(f, name)))
            .find(|(_, v)| *v != mine)
        {
            found.push(format!(
                "{name} is `{mine}` on rank 0 but `{theirs}` on rank {r}"
            ));
        }
    }
    if found.is_empty() {
        return None;
    }
    let more = found.len().saturating_sub(SHOWN);
    found.truncate(SHOWN);
    let mut s = format!(
        "the ranks were started with different command lines: {}",
        found.join("; ")
    );
    if more > 0 {
        s += &format!("; and {more} more");
    }
    s += " (every rank of an MPI job runs the same command, arguments and build)";
    Some(s)
}

impl Ranks {
    /// Refuses (bad input, on every rank) unless every rank's `fields` are the same: one
    /// all-gather of a hash, and one of the fields where the hashes differ. A collective
    /// call, made by every rank before any other.
    pub fn agree(&self, fields: &[Field]) -> Result<()> {
        let bytes = encode(fields);
        let hashes = self.exchange(&fnv1a(&bytes).to_le_bytes())?;
        if hashes.windows(2).all(|w| w[0] == w[1]) {
            return Ok(());
        }
        let all = self.exchange(&bytes)?;
        let all: Vec<Vec<Field>> = all
            .iter()
            .map(|b| serde_json::from_slice(b).unwrap_or_default())
            .collect();
        Err(Error::bad_input(difference(&all).unwrap_or_else(|| {
            "the ranks' command lines hash differently but read the same: a rank runs a different build"
                .to_string()
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<Field> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_difference_names_the_field_and_both_values() {
        let a = fields(&[(COMMAND, "run"), ("--op", "sum"), ("-p", "8")]);
        let b = fields(&[(COMMAND, "run"), ("--op", "max"), ("-p", "8")]);
        assert_eq!(difference(&[a.clone(), a.clone()]), None);
        let d = difference(&[a.clone(), a.clone(), b]).unwrap();
        assert!(
            d.contains("--op is `sum` on rank 0 but `max` on rank 2"),
            "{d}"
        );
        assert!(!d.contains("-p "), "{d}");
        // A field only one rank has.
        let c = fields(&[(COMMAND, "run"), ("--op", "sum")]);
        let d = difference(&[c, a.clone()]).unwrap();
        assert!(
            d.contains("-p is `(not given)` on rank 0 but `8` on rank 1"),
            "{d}"
        );
        // Another command: that alone is named.
        let bench = fields(&[(COMMAND, "bench"), ("-b", "1M")]);
        let d = difference(&[a, bench]).unwrap();
        assert!(
            d.contains("the command is `run` on rank 0 but `bench` on rank 1"),
            "{d}"
        );
        assert!(!d.contains("-b") && !d.contains("--op"), "{d}");
        assert_ne!(fnv1a(b"a"), fnv1a(b"b"));
    }

    #[test]
    fn ranks_that_differ_all_refuse_and_ranks_that_agree_pass() {
        let results = super::super::threads::run(3, |comm| {
            let ranks = Ranks::new(comm);
            let op = if ranks.rank() == 1 { "max" } else { "sum" };
            let differ = ranks.agree(&fields(&[(COMMAND, "run"), ("--op", op)]));
            let same = ranks.agree(&fields(&[(COMMAND, "run")]));
            (differ.map_err(|e| e.to_string()), same.is_ok())
        });
        for r in results {
            let (differ, same) = r.unwrap();
            let e = differ.unwrap_err();
            assert!(
                e.contains("--op is `sum` on rank 0 but `max` on rank 1"),
                "{e}"
            );
            assert!(same);
        }
    }
}
