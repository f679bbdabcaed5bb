//! The `tpusim` command line over the shipped collectives (see `src/cli/`).

fn main() -> std::process::ExitCode {
    tpusim::cli::main_with(tpusim::collectives::Registry::builtin())
}
