//! The tree shows the architecture: `src/` has a handful of subsystem folders, no two files
//! import each other (directly or through others), and dependencies between subsystems point
//! one way (the order `src/lib.rs` states). Read from the source text itself, so a new `use`
//! that breaks a rule fails here with the files that form the cycle or cross the layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The subsystems, from the commands down to the pure core: each may use the ones after it.
const LAYERS: [&str; 7] = [
    "cli", "service", "analysis", "suite", "grade", "task", "grading",
];

/// A module path inside the crate, e.g. `["grade", "sandbox", "docker"]`.
type ModPath = Vec<String>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every module file under `src/` (the binary's apart) by its module path.
fn module_files(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<ModPath, PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path != src.join("bin") {
                    walk(&path, src, out);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: ModPath = rel
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            out.insert(module, path);
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// Rust source as tokens: identifiers, `::`, and single punctuation characters; comments,
/// strings, raw strings, byte strings and char literals are dropped (lifetimes are kept as
/// identifiers' neighbours and never form paths).
fn tokens(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && at(i + 1) == 'r')) && {
            let j = if c == 'b' { i + 2 } else { i + 1 };
            let mut k = j;
            while at(k) == '#' {
                k += 1;
            }
            at(k) == '"' && (k > j || at(j) == '"')
        } {
            // A raw string: r"..." or r#"..."# (any number of #), b-prefixed or not.
            let mut j = if c == 'b' { i + 2 } else { i + 1 };
            let mut hashes = 0;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (1..=hashes).all(|h| at(j + h) == '#') {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if at(i + 1) == '\\' {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            // A b"..." or b'x' literal starts with an identifier-like prefix.
            let word: String = chars[start..i].iter().collect();
            if word == "b" && matches!(at(i), '"' | '\'') {
                continue;
            }
            out.push(word);
        } else if c == ':' && at(i + 1) == ':' {
            out.push("::".into());
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// The paths a `use` tree names, braces expanded (`a::{b, c::d}` → `a::b`, `a::c::d`).
fn use_paths(toks: &[String]) -> Vec<Vec<String>> {
    fn tree(toks: &[String], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        while *i < toks.len() {
            match toks[*i].as_str() {
                "{" => {
                    *i += 1;
                    while *i < toks.len() && toks[*i] != "}" {
                        tree(toks, i, &path, out);
                        if *i < toks.len() && toks[*i] == "," {
                            *i += 1;
                        }
                    }
                    *i += 1;
                    return;
                }
                "," | "}" => break,
                "::" => *i += 1,
                "as" => *i += 2,
                t => {
                    path.push(t.to_string());
                    *i += 1;
                }
            }
        }
        out.push(path);
    }
    let mut out = Vec::new();
    let mut i = 0;
    tree(toks, &mut i, &[], &mut out);
    out
}

/// Every path of this file that names a module of the crate: `use` trees, `crate::`,
/// `super::`, `self::` paths, and paths through the file's own child modules; each with the
/// number of inline modules (`mod tests { .. }`) around it, which a leading `super` leaves
/// first.
fn named_paths(toks: &[String]) -> Vec<(usize, Vec<String>)> {
    let children: BTreeSet<&str> = toks
        .windows(3)
        .filter(|w| w[0] == "mod" && is_ident(&w[1]) && w[2] == ";")
        .map(|w| w[1].as_str())
        .collect();
    let mut paths = Vec::new();
    // The brace depth at which each enclosing inline module's body started.
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        match toks[i].as_str() {
            "{" => {
                depth += 1;
                if i >= 2 && toks[i - 2] == "mod" && is_ident(&toks[i - 1]) {
                    inline.push(depth);
                }
            }
            "}" => {
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            _ => {}
        }
        if toks[i] == "use" {
            let end = toks[i..]
                .iter()
                .position(|t| t == ";")
                .map_or(toks.len(), |p| i + p);
            paths.extend(
                use_paths(&toks[i + 1..end])
                    .into_iter()
                    .map(|p| (inline.len(), p)),
            );
            i = end;
            continue;
        }
        let starts_path = (i == 0 || toks[i - 1] != "::")
            && toks.get(i + 1).is_some_and(|t| t == "::")
            && (matches!(toks[i].as_str(), "crate" | "super" | "self")
                || children.contains(toks[i].as_str()));
        if starts_path {
            let mut path = vec![toks[i].clone()];
            let mut j = i + 1;
            while j + 1 < toks.len() && toks[j] == "::" && is_ident(&toks[j + 1]) {
                path.push(toks[j + 1].clone());
                j += 2;
            }
            paths.push((inline.len(), path));
            i = j;
            continue;
        }
        i += 1;
    }
    paths
}

/// The module files a file depends on, leaving out its own submodules: a folder's `mod.rs`
/// declares, re-exports and uses its children (the folder is one unit); every other edge counts.
fn dependencies(files: &BTreeMap<ModPath, PathBuf>) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mut graph = BTreeMap::new();
    for (module, path) in files {
        let toks = tokens(&std::fs::read_to_string(path).unwrap());
        let children: BTreeSet<String> = toks
            .windows(3)
            .filter(|w| w[0] == "mod" && w[2] == ";")
            .map(|w| w[1].clone())
            .collect();
        let mut deps = BTreeSet::new();
        for (mut inline, named) in named_paths(&toks) {
            let mut base: ModPath = Vec::new();
            let mut rest = named.as_slice();
            match rest[0].as_str() {
                "crate" => rest = &rest[1..],
                "super" | "self" => {
                    base = module.clone();
                    while let Some(first) = rest.first() {
                        match first.as_str() {
                            // Out of an inline module first, then out of the file's module.
                            "super" if inline > 0 => inline -= 1,
                            "super" => {
                                base.pop();
                            }
                            "self" => {}
                            _ => break,
                        }
                        rest = &rest[1..];
                    }
                    if inline > 0 {
                        continue; // A path inside this file's inline module.
                    }
                }
                first if children.contains(first) => base = module.clone(),
                _ => continue,
            }
            let full: ModPath = base
                .into_iter()
                .chain(rest.iter().cloned())
                .filter(|s| s != "self" && s != "*")
                .collect();
            let target = (0..=full.len())
                .rev()
                .map(|n| full[..n].to_vec())
                .find(|p| files.contains_key(p));
            if let Some(target) = target
                && !target.is_empty()
                && target != *module
                && !target.starts_with(module)
            {
                deps.insert(target);
            }
        }
        graph.insert(module.clone(), deps);
    }
    graph
}

/// Strongly connected components of more than one file: each is an import cycle.
fn cycles(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct Tarjan<'a> {
        graph: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a ModPath) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in &self.graph[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.found
}

fn name(module: &ModPath) -> String {
    module.join("::")
}

#[test]
fn src_has_a_folder_per_subsystem() {
    let mut entries: Vec<String> = std::fs::read_dir(src())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lib.rs" && n != "bin")
        .collect();
    entries.sort();
    assert!(
        entries.len() <= 8,
        "src/ has {} top-level entries besides lib.rs and bin/: {entries:?}",
        entries.len()
    );
    let mut layers: Vec<&str> = LAYERS.to_vec();
    layers.sort();
    assert_eq!(
        entries, layers,
        "src/'s folders are the layers this test names"
    );
}

#[test]
fn no_two_files_import_each_other() {
    let graph = dependencies(&module_files(&src()));
    let found: Vec<String> = cycles(&graph)
        .iter()
        .map(|c| {
            let members: BTreeSet<&ModPath> = c.iter().collect();
            let edges: Vec<String> = c
                .iter()
                .flat_map(|a| {
                    graph[a]
                        .iter()
                        .filter(|b| members.contains(b))
                        .map(move |b| format!("{} -> {}", name(a), name(b)))
                })
                .collect();
            edges.join(", ")
        })
        .collect();
    assert!(
        found.is_empty(),
        "import cycles between files:\n{}",
        found.join("\n")
    );
}

#[test]
fn subsystems_depend_one_way() {
    let graph = dependencies(&module_files(&src()));
    let layer = |m: &ModPath| {
        LAYERS
            .iter()
            .position(|l| *l == m[0])
            .unwrap_or_else(|| panic!("{} is in no layer", name(m)))
    };
    let upward: Vec<String> = graph
        .iter()
        .flat_map(|(a, deps)| {
            deps.iter()
                .filter(move |b| layer(b) < layer(a))
                .map(move |b| format!("{} -> {}", name(a), name(b)))
        })
        .collect();
    assert!(
        upward.is_empty(),
        "imports against the layer order {LAYERS:?}:\n{}",
        upward.join("\n")
    );
}

#[test]
fn commands_never_import_the_dispatcher() {
    // Shared CLI pieces (errors, arguments, progress) live in modules the commands import;
    // `cli/mod.rs` only parses and dispatches.
    let graph = dependencies(&module_files(&src()));
    let dispatcher = vec!["cli".to_string()];
    let back: Vec<String> = graph
        .iter()
        .filter(|(_, deps)| deps.contains(&dispatcher))
        .map(|(a, _)| name(a))
        .collect();
    assert!(back.is_empty(), "these files import cli/mod.rs: {back:?}");
}

/// The checker itself: a cycle through a sibling, a `super::` path and a child module is found,
/// strings and comments are not read as paths, and a folder's use of its own children is not a
/// cycle.
#[test]
fn the_checker_sees_cycles_and_only_cycles() {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "pub mod a;\npub mod b;\n");
    write(
        "a/mod.rs",
        "mod x;\nmod y;\nmod z;\npub use x::X;\nfn f() { y::g(); }\n",
    );
    write("a/x.rs", "use super::y::Y;\npub struct X;\n");
    write(
        "a/y.rs",
        "pub struct Y; pub fn g() { let _ = crate::a::x::X; }\n",
    );
    write(
        "a/z.rs",
        "pub fn h() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n    mod deeper { use super::super::h; }\n}\n",
    );
    write(
        "b.rs",
        "// crate::a::x is only a comment\nconst S: &str = \"crate::a::y\";\nconst R: &str = r#\"crate::a\"#;\nfn c() -> char { '\"' }\nfn d() { crate::a::X; }\n",
    );
    let graph = dependencies(&module_files(dir.path()));
    let m = |s: &str| s.split("::").map(String::from).collect::<ModPath>();
    assert_eq!(
        graph[&m("b")],
        BTreeSet::from([m("a")]),
        "only the real path of b counts"
    );
    assert_eq!(
        graph[&m("a")],
        BTreeSet::new(),
        "a folder's use of its children is not a dependency"
    );
    assert_eq!(
        graph[&m("a::z")],
        BTreeSet::new(),
        "`super` in an inline module is the file itself"
    );
    assert_eq!(cycles(&graph), vec![vec![m("a::x"), m("a::y")]]);
}
