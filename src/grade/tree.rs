//! The submission's tree, judged from git's objects before anything of it is written on the
//! host (pure). The tree is hostile data: a submission can commit millions of files, a blob
//! that inflates to gigabytes, a submodule (gitlink) where the grader restores or plants files,
//! or a symlink in place of a directory the grader writes into. Each of these is the
//! submission's own fault (`unresolved`, `build`, with the reason), decided here from
//! `git ls-tree` output, never from the checked-out tree.

use std::collections::{BTreeMap, BTreeSet};

/// How much a head may add to its base's tree. Upstream changes add tens of files and a few
/// megabytes; these leave room for any real change and none for a tree that would stall or
/// fill the grading host.
pub const MAX_ADDED_FILES: usize = 5_000;
pub const MAX_ADDED_BYTES: u64 = 256 << 20;
/// The largest file a head may add or grow to (GitHub refuses larger pushes, too).
pub const MAX_FILE_BYTES: u64 = 100 << 20;

/// What an entry of a commit's tree is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Executable,
    Symlink,
    /// A submodule: a commit of another repository, which no grade can check out.
    Gitlink,
}

/// One entry of `git ls-tree -r -l -z`: every blob, symlink and gitlink of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    pub kind: EntryKind,
    pub path: String,
    /// Bytes of the blob (0 for a gitlink).
    pub size: u64,
}

/// Parses `git ls-tree -r -l -z --full-tree` output. An entry git would not write (an
/// unknown mode) is an error naming it.
pub fn parse_ls_tree(out: &[u8]) -> Result<Vec<TreeEntry>, String> {
    let mut entries = Vec::new();
    for record in out.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let record = String::from_utf8_lossy(record);
        let (meta, path) = record
            .split_once('\t')
            .ok_or_else(|| format!("git ls-tree printed a line without a path: {record:?}"))?;
        let mut fields = meta.split_whitespace();
        let (mode, size) = (fields.next(), fields.nth(2));
        let kind = match mode {
            Some("100644") => EntryKind::File,
            Some("100755") => EntryKind::Executable,
            Some("120000") => EntryKind::Symlink,
            Some("160000") => EntryKind::Gitlink,
            other => return Err(format!("git ls-tree printed an unknown mode {other:?}")),
        };
        let size = match size {
            Some("-") | None => 0,
            Some(n) => n
                .parse()
                .map_err(|_| format!("git ls-tree printed a size that is no number: {n:?}"))?,
        };
        entries.push(TreeEntry {
            kind,
            path: path.to_owned(),
            size,
        });
    }
    Ok(entries)
}

/// Why a head's tree is refused, or `None`. `base` is the task's base tree (empty when the
/// base is not in the submission's history: that is reported later, as not applying);
/// `written` are the paths the grader writes into (the official test files, restored from
/// the reference, and the folder the canaries are planted in).
pub fn check_tree(head: &[TreeEntry], base: &[TreeEntry], written: &[&str]) -> Option<String> {
    let base_by_path: BTreeMap<&str, &TreeEntry> =
        base.iter().map(|e| (e.path.as_str(), e)).collect();
    let added = head.len().saturating_sub(base.len());
    if added > MAX_ADDED_FILES {
        return Some(format!(
            "the submission adds {added} files to the task's base (at most {MAX_ADDED_FILES})"
        ));
    }
    let bytes = |t: &[TreeEntry]| t.iter().map(|e| e.size).sum::<u64>();
    let grown = bytes(head).saturating_sub(bytes(base));
    if grown > MAX_ADDED_BYTES {
        return Some(format!(
            "the submission adds {} MiB to the task's base (at most {} MiB)",
            grown >> 20,
            MAX_ADDED_BYTES >> 20
        ));
    }
    // The directories the grader writes into: a file, link or submodule there would have the
    // host write through it, or fail as if it were our fault.
    let dirs: BTreeSet<&str> = written
        .iter()
        .flat_map(|p| {
            p.char_indices()
                .filter(|(_, c)| *c == '/')
                .map(move |(i, _)| &p[..i])
        })
        .collect();
    for entry in head {
        let new = base_by_path
            .get(entry.path.as_str())
            .is_none_or(|b| b.kind != entry.kind || b.size < entry.size);
        if !new {
            continue; // The base has it as it is (upstream's own submodules and large files).
        }
        let path = crate::grade::report::safe_path(&entry.path);
        if entry.kind == EntryKind::Gitlink {
            return Some(format!(
                "the submission adds a submodule at {path}; submodules are not graded"
            ));
        }
        if entry.size > MAX_FILE_BYTES {
            return Some(format!(
                "the submission's {path} has {} MiB (at most {} MiB a file)",
                entry.size >> 20,
                MAX_FILE_BYTES >> 20
            ));
        }
        if dirs.contains(entry.path.as_str()) {
            return Some(format!(
                "the submission replaces the folder {path}, where official tests are restored, \
                 with a file or link"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: EntryKind, path: &str, size: u64) -> TreeEntry {
        TreeEntry {
            kind,
            path: path.into(),
            size,
        }
    }

    fn base() -> Vec<TreeEntry> {
        vec![
            entry(EntryKind::File, "pkg/mod.py", 100),
            entry(EntryKind::File, "tests/test_mod.py", 50),
            entry(EntryKind::Gitlink, "third_party/lib", 0),
            entry(EntryKind::File, "data/big.bin", 150 << 20),
        ]
    }

    #[test]
    fn parses_what_git_prints() {
        let out = b"100644 blob 3b18e512dba79e4c8300dd08aeb37f8e728b8dad      12\tpkg/a b.py\0\
120000 blob 1de565933b05f74c75ff9a6520af5f9f8a5a2f1d       7\tlink\0\
160000 commit 5fe8d3a3a8d2b77b4c5f6a2d9a1e0c7b6a5d4c3b       -\tsub\0";
        assert_eq!(
            parse_ls_tree(out).unwrap(),
            vec![
                entry(EntryKind::File, "pkg/a b.py", 12),
                entry(EntryKind::Symlink, "link", 7),
                entry(EntryKind::Gitlink, "sub", 0),
            ]
        );
        assert!(parse_ls_tree(b"040000 tree abc -\tdir\0").is_err());
        assert!(parse_ls_tree(b"100644 blob abc\0").is_err());
    }

    #[test]
    fn each_hostile_tree_is_refused_with_its_reason() {
        let written = ["tests/test_mod.py"];
        let with = |extra: Vec<TreeEntry>| {
            let mut head = base();
            head.extend(extra);
            check_tree(&head, &base(), &written)
        };
        let many: Vec<TreeEntry> = (0..=MAX_ADDED_FILES)
            .map(|i| entry(EntryKind::File, &format!("junk/{i}.py"), 1))
            .collect();
        let cases: Vec<(&str, Vec<TreeEntry>, Option<&str>)> = vec![
            (
                "a real change",
                vec![entry(EntryKind::File, "pkg/new.py", 4000)],
                None,
            ),
            ("too many files", many, Some("adds 5001 files")),
            (
                "an inflating blob",
                vec![
                    entry(EntryKind::File, "a.bin", 90 << 20),
                    entry(EntryKind::File, "b.bin", 90 << 20),
                    entry(EntryKind::File, "c.bin", 90 << 20),
                ],
                Some("adds 270 MiB"),
            ),
            (
                "one huge file",
                vec![entry(EntryKind::File, "huge.bin", 101 << 20)],
                Some("huge.bin has 101 MiB"),
            ),
            (
                "a new submodule",
                vec![entry(EntryKind::Gitlink, "conftest.py", 0)],
                Some("submodule at conftest.py"),
            ),
            (
                "the official folder as a link",
                vec![entry(EntryKind::Symlink, "tests", 5)],
                Some("replaces the folder tests"),
            ),
        ];
        for (what, extra, want) in cases {
            let got = with(extra);
            match (want, &got) {
                (None, None) => {}
                (Some(w), Some(g)) if g.contains(w) => {}
                _ => panic!("{what}: expected {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn what_the_base_already_has_is_never_the_submission_s() {
        // Upstream's own submodule and large file stay; a shrinking tree is fine.
        assert_eq!(check_tree(&base(), &base(), &["tests/test_mod.py"]), None);
        assert_eq!(
            check_tree(&base()[..2], &base(), &["tests/test_mod.py"]),
            None
        );
        // Without a base (not in the history), the limits count from nothing.
        assert_eq!(check_tree(&base()[..2], &[], &["tests/test_mod.py"]), None);
    }
}
