//! Which changed files could steer pytest or the interpreter, and so fool the grading.
//!
//! Pure: the caller reads the base and head text of each changed file and passes it in. Every
//! flagged file is neutralised by the caller (restored to the base version, or removed when
//! the submission added it); a flag never changes the verdict by itself.

use serde::{Deserialize, Serialize};

use crate::grade::workspace::Change;

/// A changed file that was neutralised, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardFlag {
    pub path: String,
    pub reason: String,
}

/// Decides whether one change touches test infrastructure. `base` and `head` are the file's
/// text before and after the change (`None` where it does not exist).
pub fn inspect(change: &Change, base: Option<&str>, head: Option<&str>) -> Option<GuardFlag> {
    let path = change.path.as_str();
    let name = path.rsplit('/').next().unwrap_or(path);
    let reason = match name {
        "conftest.py" => Some(
            "conftest.py is loaded by pytest before any test and can rewrite results".to_owned(),
        ),
        "pytest.ini" | ".pytest.ini" => Some("pytest configuration".to_owned()),
        "sitecustomize.py" | "usercustomize.py" => Some(format!(
            "{name} is imported by every Python interpreter at startup"
        )),
        _ if name.ends_with(".pth") => {
            Some(".pth files run code at interpreter startup".to_owned())
        }
        "pyproject.toml" => {
            section_changed(base, head, &["[tool.pytest.ini_options]", "[tool.pytest]"])
                .or_else(|| entry_point_changed(base, head))
                .map(|s| format!("changes the pytest configuration ({s})"))
        }
        "setup.cfg" => section_changed(base, head, &["[tool:pytest]"])
            .or_else(|| entry_point_changed(base, head))
            .map(|s| format!("changes the pytest configuration ({s})")),
        "tox.ini" => section_changed(base, head, &["[pytest]"])
            .map(|s| format!("changes the pytest configuration ({s})")),
        "setup.py" => {
            entry_point_changed(base, head).map(|s| format!("registers a pytest plugin ({s})"))
        }
        _ if name.ends_with(".py") => plugin_hooks_added(base, head)
            .map(|hook| format!("defines pytest hook or plugin `{hook}` outside a conftest.py")),
        _ => None,
    };
    reason.map(|reason| GuardFlag {
        path: change.path.clone(),
        reason,
    })
}

/// Whether a file the head adds is a module that would shadow one of the image's (the
/// standard library, pytest and what it imports): the repository is on `sys.path`, at its root
/// and (pytest's `prepend` import mode) in every folder that holds an official test file, so
/// `json.py` there is imported instead of the standard library's by whatever imports `json`
/// after it. `dirs` are those folders, relative to the repository (`""` for its root).
pub fn shadowing(change: &Change, dirs: &[&str]) -> Option<GuardFlag> {
    let path = change.path.as_str();
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    // A package: `<dir>/<name>/__init__.py` shadows `<name>` from `<dir>`.
    let (dir, module) = match (name, dir.rsplit_once('/')) {
        ("__init__.py", Some((parent, package))) => (parent, package),
        ("__init__.py", None) if !dir.is_empty() => ("", dir),
        _ => {
            let stem = name.split('.').next().unwrap_or(name);
            let importable = [".py", ".pyc", ".so"].iter().any(|e| name.ends_with(e));
            if !importable {
                return None;
            }
            (dir, stem)
        }
    };
    if !dirs.contains(&dir) {
        return None;
    }
    let shadowed = crate::grade::shadow::STDLIB.contains(&module)
        || crate::grade::shadow::INSTALLED.contains(&module);
    shadowed.then(|| GuardFlag {
        path: change.path.clone(),
        reason: format!(
            "a module named `{module}` here is imported instead of the installed one (the \
             standard library's or pytest's)"
        ),
    })
}

/// The first of `headers` whose section text differs between base and head.
fn section_changed(base: Option<&str>, head: Option<&str>, headers: &[&str]) -> Option<String> {
    headers
        .iter()
        .find(|h| section(base, h) != section(head, h))
        .map(|h| format!("section {h}"))
}

fn section<'a>(text: Option<&'a str>, header: &str) -> Option<Vec<&'a str>> {
    let mut lines = text?.lines().skip_while(|l| l.trim() != header);
    let first = lines.next()?;
    let body = lines
        .take_while(|l| !l.trim_start().starts_with('['))
        .map(str::trim)
        .filter(|l| !l.is_empty());
    Some(std::iter::once(first).chain(body).collect())
}

/// A `pytest11` entry point (how installed plugins announce themselves) added or changed.
fn entry_point_changed(base: Option<&str>, head: Option<&str>) -> Option<String> {
    let lines = |t: Option<&str>| {
        t.map(|t| t.lines().filter(|l| l.contains("pytest11")).count())
            .unwrap_or(0)
    };
    let count_changed = lines(base) != lines(head);
    let text_changed = base.is_some_and(|b| b.contains("pytest11")) && base != head;
    (count_changed || text_changed).then(|| "pytest11 entry point".to_owned())
}

/// A pytest hook (`def pytest_…`) or `pytest_plugins = …` the head adds to a Python file.
fn plugin_hooks_added(base: Option<&str>, head: Option<&str>) -> Option<String> {
    let hooks = |t: Option<&str>| -> Vec<String> {
        t.unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let l = l.trim_start();
                if let Some(rest) = l.strip_prefix("def pytest_") {
                    Some(format!(
                        "pytest_{}",
                        rest.split('(').next().unwrap_or_default()
                    ))
                } else if l.starts_with("pytest_plugins") {
                    Some("pytest_plugins".to_owned())
                } else {
                    None
                }
            })
            .collect()
    };
    let before = hooks(base);
    hooks(head).into_iter().find(|h| !before.contains(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_modules_that_shadow_installed_ones_are_flagged() {
        let dirs = ["", "tests"];
        let added = |path: &str| Change {
            status: 'A',
            path: path.to_owned(),
        };
        for (path, flagged) in [
            ("json.py", true),
            ("iniconfig.py", true),
            ("pluggy/__init__.py", true),
            ("tests/inspect.py", true),
            ("tests/unittest/__init__.py", true),
            ("_pytest.cpython-311-x86_64-linux-gnu.so", true),
            ("copy.pyc", true),
            ("minicache/json.py", false),
            ("tests/helpers.py", false),
            ("json.txt", false),
            ("docs/json/__init__.py", false),
        ] {
            assert_eq!(shadowing(&added(path), &dirs).is_some(), flagged, "{path}");
        }
    }

    fn check(path: &str, base: Option<&str>, head: Option<&str>) -> Option<String> {
        let change = Change {
            status: 'M',
            path: path.to_owned(),
        };
        inspect(&change, base, head).map(|f| f.reason)
    }

    #[test]
    fn flags_what_can_steer_pytest_and_nothing_else() {
        let cases: &[(&str, Option<&str>, Option<&str>, bool)] = &[
            ("conftest.py", None, Some("x = 1"), true),
            ("tests/unit/conftest.py", Some("a"), Some("b"), true),
            (
                "pytest.ini",
                None,
                Some("[pytest]\naddopts = -p no:x"),
                true,
            ),
            ("pkg/sitecustomize.py", None, Some("import os"), true),
            ("usercustomize.py", None, Some(""), true),
            ("lib/evil.pth", None, Some("import os"), true),
            (
                "pyproject.toml",
                Some("[project]\nname='a'\n"),
                Some("[project]\nname='b'\n"),
                false,
            ),
            (
                "pyproject.toml",
                Some("[tool.pytest.ini_options]\naddopts='-q'\n"),
                Some("[tool.pytest.ini_options]\naddopts='-q -p evil'\n"),
                true,
            ),
            (
                "pyproject.toml",
                Some("[project]\n"),
                Some("[project]\n[project.entry-points.pytest11]\nx='y'\n"),
                true,
            ),
            (
                "setup.cfg",
                Some("[metadata]\nname=a\n"),
                Some("[metadata]\nname=a\n[tool:pytest]\naddopts=-x\n"),
                true,
            ),
            (
                "setup.cfg",
                Some("[metadata]\nname=a\n"),
                Some("[metadata]\nname=b\n"),
                false,
            ),
            (
                "tox.ini",
                Some("[tox]\n"),
                Some("[tox]\n[pytest]\naddopts=-p x\n"),
                true,
            ),
            (
                "tox.ini",
                Some("[tox]\nenvlist=a\n"),
                Some("[tox]\nenvlist=b\n"),
                false,
            ),
            (
                "pkg/plugin.py",
                None,
                Some("def pytest_runtest_makereport(item, call):\n    pass\n"),
                true,
            ),
            (
                "pkg/mod.py",
                Some("def pytest_x():\n"),
                Some("def pytest_x():\n  return 1\n"),
                false,
            ),
            ("pkg/core.py", Some("x = 1"), Some("x = 2"), false),
            (
                "pkg/__init__.py",
                None,
                Some("pytest_plugins = ['evil']"),
                true,
            ),
        ];
        for (path, base, head, flagged) in cases {
            assert_eq!(
                check(path, *base, *head).is_some(),
                *flagged,
                "{path}: {base:?} -> {head:?}"
            );
        }
    }

    #[test]
    fn reasons_say_why() {
        assert_eq!(
            check("conftest.py", None, Some("")).unwrap(),
            "conftest.py is loaded by pytest before any test and can rewrite results"
        );
        assert_eq!(
            check("tox.ini", Some(""), Some("[pytest]\naddopts=-x")).unwrap(),
            "changes the pytest configuration (section [pytest])"
        );
    }
}
