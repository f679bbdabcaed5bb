//! No import circle among the modules of the library (`src/`) or of the Python extension
//! (`python/src/`). Each file is a module (a folder's `mod.rs` its face); every path a
//! file names from the crate root (`crate::`, `super::`, and inside the library
//! `tpusim::`, which its `cli` uses) is an edge to the deepest module file the path
//! reaches. A folder and the files inside it are one unit to each other (a `mod.rs`
//! declares and re-exports its children, which use what it defines), so edges between a
//! module and its own ancestors or descendants do not count; all others must form no
//! cycle. Comments do not count (an intra-doc link is no dependency).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from the crate root (`src/a/b/mod.rs` and `src/a/b.rs` -> `[a, b]`).
type Module = Vec<String>;

/// Edges of one crate's module graph, each with a file and line that makes it.
type Graph = BTreeMap<Module, BTreeMap<Module, String>>;

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module `file` below `root` is.
fn module_of(root: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(root).unwrap();
    let mut parts: Module = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths a use-tree at the start of `text` names, each appended to `prefix`:
/// `a::b::C` -> `[a, b, C]`, `a::{b::C, d}` -> `[a, b, C]` and `[a, d]`.
fn paths(prefix: &[String], text: &str, out: &mut Vec<Module>) {
    let mut path = prefix.to_vec();
    let mut rest = text.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        paths(&path, &group[start..i], out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        paths(&path, &group[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        path.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    if path.len() > prefix.len() {
        out.push(path);
    }
}

/// The paths from the crate root that `code` (one file, comments removed) names.
fn named(code: &str, at: &Module, crate_names: &[&str]) -> Vec<Module> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("::") {
        // The whole `a::b::…` chain this `::` starts from its first segment.
        let head_start = code[..i].rfind(|c: char| !is_ident(c)).map_or(0, |j| j + 1);
        if code[..head_start].ends_with("::") {
            continue; // not the first segment
        }
        let head = &code[head_start..i];
        let rest = &code[i + 2..];
        if crate_names.contains(&head) {
            paths(&[], rest, &mut out);
        } else if head == "super" {
            // `super` from `a/b/c.rs` ([a, b, c]) and from `a/b/c/mod.rs` is [a, b].
            let mut base = at.clone();
            base.pop();
            let mut rest = rest;
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            paths(&base, rest, &mut out);
        }
    }
    out
}

/// The deepest module `path` reaches.
fn reached(path: &[String], modules: &BTreeSet<Module>) -> Module {
    let mut best = Vec::new();
    for k in 1..=path.len() {
        if modules.contains(&path[..k].to_vec()) {
            best = path[..k].to_vec();
        } else {
            break;
        }
    }
    best
}

/// The module graph of the crate whose root file is in `root`.
fn graph(root: &Path, crate_names: &[&str]) -> Graph {
    graph_of(root, crate_names, false)
}

/// [`graph`], without test code when `no_tests`: files named `tests.rs`, and an inline
/// `#[cfg(test)] mod … {` block to the end of its file (where this crate keeps them).
fn graph_of(root: &Path, crate_names: &[&str], no_tests: bool) -> Graph {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let modules: BTreeSet<Module> = files.iter().map(|f| module_of(root, f)).collect();
    let mut g = Graph::new();
    for file in &files {
        if no_tests && file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let at = module_of(root, file);
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in text.lines().enumerate() {
            let opens_tests = line.trim() == "#[cfg(test)]"
                && lines
                    .get(n + 1)
                    .is_some_and(|l| l.contains("mod ") && l.contains('{'));
            if no_tests && opens_tests {
                break;
            }
            let code = line.split("//").next().unwrap();
            for path in named(code, &at, crate_names) {
                let to = reached(&path, &modules);
                let kin = to.starts_with(&at) || at.starts_with(&to);
                if !to.is_empty() && !kin {
                    let at_line = format!("{}:{}", file.display(), n + 1);
                    g.entry(at.clone())
                        .or_default()
                        .entry(to)
                        .or_insert(at_line);
                }
            }
        }
    }
    g
}

/// One cycle of `g`, as its edges (`a -> b (file:line)`), or `None`.
fn cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        g: &Graph,
        node: &Module,
        done: &mut BTreeSet<Module>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<String>> {
        stack.push(node.clone());
        for next in g.get(node).into_iter().flat_map(|e| e.keys()) {
            if let Some(from) = stack.iter().position(|n| n == next) {
                let mut around = stack[from..].to_vec();
                around.push(next.clone());
                let edges = around
                    .windows(2)
                    .map(|w| {
                        let why = &g[&w[0]][&w[1]];
                        format!("{} -> {} ({why})", w[0].join("::"), w[1].join("::"))
                    })
                    .collect();
                return Some(edges);
            }
            if !done.contains(next) {
                if let Some(c) = visit(g, next, done, stack) {
                    return Some(c);
                }
            }
        }
        stack.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    for node in g.keys() {
        if !done.contains(node) {
            if let Some(c) = visit(g, node, &mut done, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn assert_acyclic(dir: &str, crate_names: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let g = graph(&root, crate_names);
    assert!(g.len() > 5, "too few module edges found under {dir}: {g:?}");
    if let Some(c) = cycle(&g) {
        panic!("import circle in {dir}:\n  {}", c.join("\n  "));
    }
}

#[test]
fn the_library_has_no_import_circle() {
    assert_acyclic("src", &["crate", "tpusim"]);
}

#[test]
fn the_python_extension_has_no_import_circle() {
    assert_acyclic("python/src", &["crate"]);
}

#[test]
fn the_detector_finds_a_circle_and_only_one() {
    // a -> b::c through a group, b::c -> a through `super::super::`, b -> b::c and
    // b::c -> b (kin) and a commented-out x -> a do not count.
    let dir = std::env::temp_dir().join(format!("tpusim-layers-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("b")).unwrap();
    let files = [
        ("lib.rs", "mod a;\nmod b;\nmod x;\n"),
        ("a.rs", "use crate::{x::y, b::c::Thing};\n"),
        ("b/mod.rs", "mod c;\npub use c::Thing;\n"),
        ("b/c.rs", "use super::super::a::f;\nuse super::Other;\n"),
        (
            "x.rs",
            "// use crate::a;\nfn y() { crate::b::Thing::new(); }\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let g = graph(&dir, &["crate"]);
    let found = cycle(&g);
    std::fs::remove_dir_all(&dir).unwrap();
    let m = |s: &str| s.split("::").map(String::from).collect::<Module>();
    let edges: BTreeSet<(Module, Module)> = g
        .iter()
        .flat_map(|(a, to)| to.keys().map(|b| (a.clone(), b.clone())))
        .collect();
    let want: BTreeSet<(Module, Module)> = [("a", "x"), ("a", "b::c"), ("b::c", "a"), ("x", "b")]
        .iter()
        .map(|(a, b)| (m(a), m(b)))
        .collect();
    assert_eq!(edges, want);
    let c = found.expect("the circle a -> b::c -> a");
    assert_eq!(c.len(), 2, "{c:?}");
}

#[test]
fn every_folder_says_what_it_is() {
    // A folder's `mod.rs` opens with its module doc (`//!`), so the tree reads as the
    // pipeline: what each folder is, in one line, before anything else.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let faces: Vec<&PathBuf> = files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n == "mod.rs"))
        .collect();
    assert!(faces.len() > 10, "too few folders found: {faces:?}");
    let bare: Vec<String> = faces
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            !text.lines().next().is_some_and(|l| l.starts_with("//! "))
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(bare.is_empty(), "folders without a module doc: {bare:?}");
}

/// The edges between the crate's top-level modules (`src/run/…` is `run`) that lie on a
/// circle, as `a -> b`, test code left out.
fn top_level_circles(dir: &str) -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, to) in graph_of(&root, &["crate", "tpusim"], true) {
        for b in to.keys() {
            if a[0] != b[0] {
                top.entry(a[0].clone()).or_default().insert(b[0].clone());
            }
        }
    }
    // An edge a -> b lies on a circle when b reaches a.
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(n) = todo.pop() {
            if n == to {
                return true;
            }
            if seen.insert(n.clone()) {
                todo.extend(top.get(&n).into_iter().flatten().cloned());
            }
        }
        false
    };
    top.iter()
        .flat_map(|(a, to)| to.iter().map(move |b| (a, b)))
        .filter(|(a, b)| reaches(b, a))
        .map(|(a, b)| format!("{a} -> {b}"))
        .collect()
}

#[test]
fn the_top_level_modules_have_no_circle() {
    // Between folders as well as files, test code aside: the pipeline reads one way
    // (`source` below `ir` and `error`, `steer` below `verify`, `trace` and `model`, the
    // budget's chunk below `run`).
    let found = top_level_circles("src");
    assert!(
        found.is_empty(),
        "top-level module edges on a circle: {found:?}"
    );
}
