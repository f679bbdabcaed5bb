//! Where a command runs: `-p P` (a ring of P devices on axis x) or `--mesh AxB[xC]`
//! (axes x, y, z) with `--axis` for a ring collective; one set of flags every command
//! takes.

use tpusim::collectives::Collective;
use tpusim::mesh::Placement;
use tpusim::{Error, Mesh};

/// The mesh flags.
#[derive(clap::Args, Clone, Debug)]
pub struct PlaceArgs {
    /// Number of devices.
    #[arg(
        short = 'p',
        long = "devices",
        default_value = "4",
        allow_hyphen_values = true
    )]
    pub devices: String,
    /// A multi-axis mesh, e.g. 2x4 (axes x and y): a ring collective runs over `--axis`,
    /// every group along it an independent ring; a whole-mesh one (allreduce_2d) on all
    /// of it.
    #[arg(long, conflicts_with = "devices")]
    pub mesh: Option<String>,
    /// The mesh axis a ring collective runs over (with --mesh; default x), or several
    /// (`x,y`: one ring through every device of both, row-major).
    #[arg(long, requires = "mesh")]
    pub axis: Option<String>,
}

impl PlaceArgs {
    /// The mesh: `--mesh AxB[xC]`, or the 1-D mesh of `-p` when none.
    pub fn mesh(&self) -> tpusim::Result<Mesh> {
        let Some(spec) = &self.mesh else {
            return Mesh::new(
                tpusim::args::DEVICES.parse_as("-p", &self.devices)? as usize,
                "x",
            );
        };
        let bad = || {
            Error::bad_input(format!(
                "bad mesh `{spec}` (expected sizes per axis, e.g. 2x4 for axes x and y)"
            ))
        };
        let sizes: Vec<usize> = spec
            .split('x')
            .map(|d| d.trim().parse::<usize>().ok().filter(|&n| n > 0))
            .collect::<Option<_>>()
            .ok_or_else(bad)?;
        if sizes.is_empty() || sizes.len() > 3 {
            return Err(bad());
        }
        let axes: Vec<(&str, usize)> = ["x", "y", "z"].into_iter().zip(sizes).collect();
        Mesh::with_axes(&axes)
    }

    /// Where `c` runs: on `--mesh` (along `--axis` for a ring collective; whole for a
    /// whole-mesh one), or on the 1-D mesh of `-p` when no mesh is given.
    pub fn placement(&self, c: &dyn Collective) -> tpusim::Result<Placement> {
        let mesh = self.mesh()?;
        if self.mesh.is_none() {
            return Ok(Placement::whole(mesh));
        }
        Placement::of(c.span(), c.name(), mesh, self.axis.as_deref())
    }

    /// The flags as a replay command repeats them: `-p 4`, `--mesh 2x4 --axis y`.
    pub fn flags(&self) -> String {
        match (&self.mesh, &self.axis) {
            (Some(m), Some(x)) => format!("--mesh {m} --axis {x}"),
            (Some(m), None) => format!("--mesh {m}"),
            _ => format!("-p {}", self.devices.trim()),
        }
    }
}
