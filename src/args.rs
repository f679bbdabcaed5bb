//! The arguments every entry point takes, checked in one place: the command line and
//! the Python package (`tpusim._native`, for `python -m tpusim`, `tpusim.check(...)`,
//! the environment's `TPUSIM_*` variables) parse counts, seeds and schedules here, so
//! a bad one gets the same rule and the same message wherever it was typed; only its
//! name is spelled as the caller spelled it (`--schedules`, `schedules`,
//! `TPUSIM_DEVICES`).

use crate::error::{Error, Result};
use crate::sched::ScheduleSpec;

/// A whole number an entry point takes (a count, a seed), and its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Count {
    /// How the command line names it (`--schedules`); callers with other spellings
    /// name it themselves ([`Count::parse_as`]).
    pub flag: &'static str,
    /// The least value taken.
    pub min: u64,
    /// The largest value taken.
    pub max: u64,
}

/// Devices of a mesh (`-p`, `python -m tpusim --devices`, `TPUSIM_DEVICES`).
pub const DEVICES: Count = Count {
    flag: "--devices",
    min: 1,
    max: crate::mesh::MAX_DEVICES as u64,
};
/// Schedules of a check (`--schedules`).
pub const SCHEDULES: Count = Count {
    flag: "--schedules",
    min: 1,
    max: 1_000_000,
};
/// A seed (`--seed`: the first random schedule of a check, a run's random data).
pub const SEED: Count = Count {
    flag: "--seed",
    min: 0,
    max: u64::MAX,
};
/// Kernel invocations back to back (`--repeat`).
pub const REPEAT: Count = Count {
    flag: "--repeat",
    min: 1,
    max: u64::MAX,
};
/// Timed iterations of a bench (`-n`).
pub const ITERS: Count = Count {
    flag: "-n",
    min: 1,
    max: u64::MAX,
};
/// Warm-up iterations of a bench (`-w`).
pub const WARMUP: Count = Count {
    flag: "-w",
    min: 0,
    max: u64::MAX,
};
/// Check iterations of a bench (`-c`).
pub const CHECKS: Count = Count {
    flag: "-c",
    min: 0,
    max: u64::MAX,
};
/// The size factor between a sweep's steps (`-f`).
pub const FACTOR: Count = Count {
    flag: "-f",
    min: 2,
    max: u64::MAX,
};

impl Count {
    /// `text` (a number as typed, of any size or sign) checked as the command line
    /// names it.
    pub fn parse(&self, text: &str) -> Result<u64> {
        self.parse_as(self.flag, text)
    }

    /// `text` checked, named `name` in the message.
    pub fn parse_as(&self, name: &str, text: &str) -> Result<u64> {
        let t = text.trim();
        let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
        let whole = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
        // Beyond u64 by its digits: a sign says which end it is beyond.
        match t.parse::<u64>() {
            Ok(v) if (self.min..=self.max).contains(&v) => Ok(v),
            _ => Err(self.refuse(name, text, whole)),
        }
    }

    /// `value` (a count already in hand) checked, named `name`.
    pub fn check_as(&self, name: &str, value: u64) -> Result<u64> {
        self.parse_as(name, &value.to_string())
    }

    fn refuse(&self, name: &str, text: &str, whole: bool) -> Error {
        let t = text.trim();
        let range = match (self.min, self.max) {
            (0, u64::MAX) => "a whole number from 0 to 2^64 - 1".to_string(),
            // Past u64 by its digits.
            (_, u64::MAX) if whole && !t.starts_with('-') && t.parse::<u64>().is_err() => {
                return Error::bad_input(format!(
                    "{name} {t} is more than can be counted (at most 2^64 - 1)"
                ))
            }
            (min, u64::MAX) => format!("a whole number of at least {min}"),
            (min, max) => format!("between {min} and {max}"),
        };
        let shown = if whole {
            t.to_string()
        } else {
            format!("`{text}`")
        };
        Error::bad_input(format!("{name} must be {range} (got {shown})"))
    }
}

/// A schedule as typed (`eager`, `run-ahead:2`, `random:7`, a bare seed) for a mesh of
/// `devices` devices (`None`: not known yet; it is checked again when it is).
pub fn schedule(text: &str, devices: Option<usize>) -> Result<ScheduleSpec> {
    let spec = ScheduleSpec::parse(text)?;
    if let Some(p) = devices {
        spec.validate(p)?;
    }
    Ok(spec)
}

/// The value of environment variable `var` parsed by `parse`, which is given the name
/// to use in its message (`None`: unset). A value that is not text is refused.
pub fn from_env<T>(var: &str, parse: impl FnOnce(&str, &str) -> Result<T>) -> Result<Option<T>> {
    match std::env::var(var) {
        Ok(v) => parse(var, &v).map(Some),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(Error::bad_input(format!("{var}={v:?} is not text")))
        }
    }
}

/// A message about the value `text` of `name` (an environment variable's), prefixed
/// with both unless it names `name` already.
pub fn named(name: &str, text: &str, e: Error) -> Error {
    match e {
        Error::BadInput(m) if !m.contains(name) => Error::BadInput(format!("{name}=`{text}`: {m}")),
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_refused_by_their_range_whatever_their_size_or_sign() {
        assert_eq!(SCHEDULES.parse("200").unwrap(), 200);
        for (text, shown) in [
            ("-5", "-5"),
            ("0", "0"),
            ("1000001", "1000001"),
            ("99999999999999999999999999", "99999999999999999999999999"),
            ("abc", "`abc`"),
            ("", "``"),
            ("2.5", "`2.5`"),
        ] {
            let e = SCHEDULES.parse(text).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("bad input: --schedules must be between 1 and 1000000 (got {shown})")
            );
        }
        let e = FACTOR.parse("1").unwrap_err().to_string();
        assert_eq!(
            e,
            "bad input: -f must be a whole number of at least 2 (got 1)"
        );
        let e = FACTOR
            .parse("99999999999999999999")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "bad input: -f 99999999999999999999 is more than can be counted (at most 2^64 - 1)"
        );
        let e = SEED.parse_as("seed", "-1").unwrap_err().to_string();
        assert_eq!(
            e,
            "bad input: seed must be a whole number from 0 to 2^64 - 1 (got -1)"
        );
        assert_eq!(SEED.parse("18446744073709551615").unwrap(), u64::MAX);
        assert!(SEED.parse("18446744073709551616").is_err());
        assert!(DEVICES.parse("100000000000").is_err());
        assert_eq!(DEVICES.check_as("devices", 4).unwrap(), 4);
    }

    #[test]
    fn environment_values_are_named_by_their_variable() {
        let e = named("TPUSIM_SCHEDULE", "x", schedule("x", None).unwrap_err()).to_string();
        assert!(
            e.starts_with("bad input: TPUSIM_SCHEDULE=`x`: unknown schedule `x`"),
            "{e}"
        );
        let e = DEVICES
            .parse_as("TPUSIM_DEVICES", "abc")
            .unwrap_err()
            .to_string();
        assert!(e.contains("TPUSIM_DEVICES must be between 1 and"), "{e}");
    }

    #[test]
    fn schedules_are_checked_against_the_mesh_when_it_is_known() {
        assert!(schedule("run-ahead:9", None).is_ok());
        let e = schedule("run-ahead:9", Some(4)).unwrap_err().to_string();
        assert!(e.contains("names device 9"), "{e}");
        assert!(schedule("sideways", None).is_err());
    }
}
