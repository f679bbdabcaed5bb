//! The registry: the collectives the tool knows, by name. The built-in one lists the
//! shipped collectives; a user crate adds its own and hands the registry to
//! `tpusim::cli::main_with`.

use super::{
    AllGather, AllGatherBidir, AllGatherMatmul, AllReduce2d, AllReduceTorus, AllToAll, Collective,
    MatmulReduceScatter, Options, Ppermute, Psum, PsumScatter, RingAllReduce, RingAllReducePush,
};
use crate::error::{Error, Result};
use crate::kernel::ReduceOp;
use std::sync::Arc;

/// Collectives by name, in the order `demo`, `check all` and `bench all` run them.
#[derive(Clone, Default)]
pub struct Registry {
    items: Vec<Arc<dyn Collective>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The shipped collectives.
    pub fn builtin() -> Self {
        let mut r = Self::new();
        let all: Vec<Arc<dyn Collective>> = vec![
            Arc::new(Ppermute::default()),
            Arc::new(AllGather),
            Arc::new(Psum { op: ReduceOp::Sum }),
            Arc::new(PsumScatter),
            Arc::new(RingAllReduce { op: ReduceOp::Sum }),
            Arc::new(RingAllReducePush { op: ReduceOp::Sum }),
            Arc::new(AllGatherBidir),
            Arc::new(AllToAll),
            Arc::new(AllReduce2d { op: ReduceOp::Sum }),
            Arc::new(AllReduceTorus { op: ReduceOp::Sum }),
            Arc::new(AllGatherMatmul),
            Arc::new(MatmulReduceScatter),
        ];
        for c in all {
            r.register(c).expect("the shipped names are distinct");
        }
        r
    }

    /// Adds `c`; a name already taken is an error.
    pub fn register(&mut self, c: Arc<dyn Collective>) -> Result<()> {
        if self.items.iter().any(|x| x.name() == c.name()) {
            return Err(Error::bad_input(format!(
                "a collective named `{}` is already registered",
                c.name()
            )));
        }
        self.items.push(c);
        Ok(())
    }

    /// `self` with `c` added.
    pub fn with(mut self, c: Arc<dyn Collective>) -> Result<Self> {
        self.register(c)?;
        Ok(self)
    }

    /// Every name, in order.
    pub fn names(&self) -> Vec<&str> {
        self.items.iter().map(|c| c.name()).collect()
    }

    /// Every collective with its default options, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Collective>> {
        self.items.iter()
    }

    /// The collective called `name`, with default options.
    pub fn by_name(&self, name: &str) -> Result<Arc<dyn Collective>> {
        self.items
            .iter()
            .find(|c| c.name() == name)
            .cloned()
            .ok_or_else(|| {
                Error::bad_input(format!(
                    "unknown collective `{name}` (known: {})",
                    self.names().join(", ")
                ))
            })
    }

    /// The collective called `name` with `opts`, or an error saying what does not fit.
    pub fn get(&self, name: &str, opts: &Options) -> Result<Arc<dyn Collective>> {
        let c = self.by_name(name)?;
        if *opts == Options::default() {
            return Ok(c);
        }
        let takes = c.takes();
        let who = |f: fn(&Arc<dyn Collective>) -> bool| {
            let v: Vec<&str> = self
                .items
                .iter()
                .filter(|c| f(c))
                .map(|c| c.name())
                .collect();
            match v.len() {
                0 => "none does".to_string(),
                1 => format!("{} does", v[0]),
                _ => format!("{} and {} do", v[..v.len() - 1].join(", "), v[v.len() - 1]),
            }
        };
        if opts.op != ReduceOp::Sum && !takes.op {
            return Err(Error::bad_input(format!(
                "`{name}` does not take --op; {}",
                who(|c| c.takes().op)
            )));
        }
        if opts.perm.is_some() && !takes.perm {
            return Err(Error::bad_input(format!(
                "`{name}` does not take --perm; {}",
                who(|c| c.takes().perm)
            )));
        }
        c.with_options(opts)
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}
