//! The `tpusim` command line: run, check, trace, bench, demo and info (see `src/cli/`).

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
