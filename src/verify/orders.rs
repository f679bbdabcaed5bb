//! Which credits each passed wait is ordered after: the answer of the fixpoint in
//! `sync.rs`, stored in a few bytes a wait (a run at large P has millions of waits).

/// Which credits a passed wait is ordered after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Join<'a> {
    /// Every credit of its semaphore that came before it.
    All,
    /// None of them.
    Nothing,
    /// Exactly these credit ids.
    Some(&'a [usize]),
}

/// An id in a [`Join::Some`] list with this bit set stands for the credit's clock
/// only, not for its DMA side's completion: the wait is certain to come after some of
/// that sender's credits, not after all of this one's bytes.
pub const CLOCK_ONLY: usize = 1 << (usize::BITS - 1);

/// [`Orders`]'s code for [`Join::All`].
const ALL: u32 = 0;
/// [`Orders`]'s code for [`Join::Nothing`]; a code above is 2 + an index in `lists`.
const NOTHING: u32 = 1;

/// One [`Join`] per wait of the run, by the wait's ordinal (its rank among the run's waits).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Orders {
    codes: Vec<u32>,
    lists: Vec<Vec<usize>>,
}

impl Orders {
    /// `waits` waits, each ordered after every credit before it (the fixpoint's first guess).
    pub fn all(waits: usize) -> Orders {
        Orders {
            codes: vec![ALL; waits],
            lists: Vec::new(),
        }
    }

    /// What wait `ordinal` is ordered after.
    pub fn get(&self, ordinal: usize) -> Join<'_> {
        match self.codes[ordinal] {
            ALL => Join::All,
            NOTHING => Join::Nothing,
            i => Join::Some(&self.lists[i as usize - 2]),
        }
    }

    /// Appends the next wait's answer (no ids: [`Join::Nothing`]).
    pub fn push(&mut self, j: Join<'_>) {
        let code = match j {
            Join::All => ALL,
            Join::Some(ids) if !ids.is_empty() => {
                self.lists.push(ids.to_vec());
                u32::try_from(self.lists.len() + 1).expect("fewer than 2^32 waits")
            }
            _ => NOTHING,
        };
        self.codes.push(code);
    }

    /// The credit ids some wait joins individually (whole or their clock only).
    pub fn kept(&self) -> impl Iterator<Item = usize> + '_ {
        self.lists.iter().flatten().map(|&i| i & !CLOCK_ONLY)
    }

    /// What both `self` and `prev` order (the fixpoint only ever drops edges).
    pub fn meet(&self, prev: &Orders) -> Orders {
        let mut out = Orders::default();
        for i in 0..self.codes.len() {
            match (self.get(i), prev.get(i)) {
                (_, Join::Nothing) | (Join::Nothing, _) => out.push(Join::Nothing),
                (a, Join::All) => out.push(a),
                (Join::All, b) => out.push(b),
                (Join::Some(x), Join::Some(y)) => {
                    let both: Vec<usize> = x.iter().copied().filter(|i| y.contains(i)).collect();
                    out.push(Join::Some(&both));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_meet_keeps_what_both_order() {
        let mut a = Orders::default();
        let mut b = Orders::default();
        for j in [Join::All, Join::Some(&[1, 2]), Join::Some(&[]), Join::All] {
            a.push(j);
        }
        for j in [
            Join::Some(&[3]),
            Join::Some(&[2, 5]),
            Join::All,
            Join::Nothing,
        ] {
            b.push(j);
        }
        assert_eq!(a.get(1), Join::Some(&[1, 2]));
        assert_eq!(a.get(2), Join::Nothing);
        let m = a.meet(&b);
        let got: Vec<Join> = (0..4).map(|i| m.get(i)).collect();
        assert_eq!(
            got,
            [
                Join::Some(&[3]),
                Join::Some(&[2]),
                Join::Nothing,
                Join::Nothing
            ]
        );
        assert_eq!(a.kept().collect::<Vec<_>>(), [1, 2]);
    }
}
