//! Every flag and argument of every `tpusim` command says what it is for (`--help`).

fn missing(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if matches!(id, "help" | "version") {
            continue;
        }
        let has = arg
            .get_help()
            .is_some_and(|h| !h.to_string().trim().is_empty());
        if !has {
            out.push(format!("{path} {id}"));
        }
    }
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        if sub.get_about().is_none() {
            out.push(format!("{path} {} (the command)", sub.get_name()));
        }
        missing(sub, &format!("{path} {}", sub.get_name()), out);
    }
}

#[test]
fn every_cli_flag_has_help_text() {
    let cmd = tpusim::cli::command();
    let mut out = Vec::new();
    missing(&cmd, "tpusim", &mut out);
    assert!(out.is_empty(), "without help text: {out:#?}");
    // The walk itself sees the flags (and would see one without help).
    let flags: usize = cmd
        .get_subcommands()
        .map(|s| s.get_arguments().count())
        .sum();
    assert!(flags > 20, "{flags}");
    let bare = clap::Command::new("x").arg(clap::Arg::new("bare").long("bare"));
    let mut found = Vec::new();
    missing(&bare, "x", &mut found);
    assert_eq!(found, ["x bare"]);
}
