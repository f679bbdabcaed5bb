//! Which loop iteration an op was recorded in: the iteration of every enclosing loop of
//! the kernel, interned into a table of iteration contexts so that a site holds 4 bytes
//! for it (a program at large P has millions of sites).

use super::SourceLoc;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::{LazyLock, Mutex};

/// One level of an iteration context: iteration `index` of the loop at `at`, inside
/// the context `outer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Level {
    outer: Iteration,
    at: SourceLoc,
    index: u32,
}

/// Every context interned so far, by number less one (number 0 is outside every loop),
/// and each one's number.
type Table = (Vec<Level>, HashMap<Level, Iteration>);

/// The contexts of this process.
static LEVELS: LazyLock<Mutex<Table>> = LazyLock::new(|| Mutex::new((Vec::new(), HashMap::new())));

thread_local! {
    /// This thread's numbers by level: the devices of a trace enter the same
    /// iterations, so most look-ups answer without the lock.
    static SEEN: RefCell<HashMap<Level, Iteration>> = RefCell::new(HashMap::new());
}

/// An iteration context: the iteration of each loop an op sits in, outermost first, or
/// none (outside every loop). `Copy`, 4 bytes; equal contexts are equal numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Iteration(u32);

impl Iteration {
    /// Outside every loop.
    pub const NONE: Iteration = Iteration(0);

    /// Iteration `index` of the loop at `at`, nested in this context.
    pub fn within(self, at: SourceLoc, index: u32) -> Iteration {
        let level = Level {
            outer: self,
            at,
            index,
        };
        if let Some(it) = SEEN.with(|s| s.borrow().get(&level).copied()) {
            return it;
        }
        let it = {
            let mut guard = LEVELS.lock().unwrap_or_else(|e| e.into_inner());
            let (levels, numbers) = &mut *guard;
            *numbers.entry(level).or_insert_with(|| {
                levels.push(level);
                Iteration(u32::try_from(levels.len()).expect("fewer than 2^32 loop iterations"))
            })
        };
        SEEN.with(|s| s.borrow_mut().insert(level, it));
        it
    }

    /// True outside every loop.
    pub fn is_none(&self) -> bool {
        self.0 == 0
    }

    /// Each loop's line and iteration, outermost first (empty outside every loop).
    pub fn levels(self) -> Vec<(SourceLoc, u32)> {
        let mut out = Vec::new();
        let mut it = self;
        let guard = LEVELS.lock().unwrap_or_else(|e| e.into_inner());
        let levels = &guard.0;
        while it.0 != 0 {
            let l = levels[it.0 as usize - 1];
            out.push((l.at, l.index));
            it = l.outer;
        }
        out.reverse();
        out
    }
}

impl fmt::Display for Iteration {
    /// `iteration 2 of the loop at k.py:40`, inner loops first and each outer one after
    /// `within` (empty outside every loop).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, (at, i)) in self.levels().iter().rev().enumerate() {
            if n > 0 {
                write!(f, " within ")?;
            }
            write!(f, "iteration {i} of the loop at {at}")?;
        }
        Ok(())
    }
}

/// Serialized as it prints.
impl serde::Serialize for Iteration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_are_interned_and_name_every_level() {
        let outer = SourceLoc::intern("k.py", 40);
        let inner = SourceLoc::intern("k.py", 42);
        let a = Iteration::NONE.within(outer, 2).within(inner, 0);
        let b = Iteration::NONE.within(outer, 2).within(inner, 0);
        assert_eq!(a, b);
        assert_ne!(a, Iteration::NONE.within(outer, 1).within(inner, 0));
        assert_eq!(a.levels(), vec![(outer, 2), (inner, 0)]);
        assert_eq!(
            a.to_string(),
            "iteration 0 of the loop at k.py:42 within iteration 2 of the loop at k.py:40"
        );
        assert!(Iteration::NONE.is_none() && Iteration::NONE.to_string().is_empty());
    }
}
