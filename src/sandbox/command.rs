//! The command line and environment of a phase, given where things are inside the sandbox.
//! Pure, and shared by both executors so they run exactly the same pytest.

use crate::grading::Phase;

/// Where the sandbox sees each mount (container paths for Docker, host paths for local).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub repo: String,
    pub probes: Option<String>,
    pub lib: String,
    pub spec: String,
    pub out: String,
    pub scratch: String,
}

impl Layout {
    /// The fixed layout inside a Docker sandbox (docs/grading.md).
    pub fn container(with_probes: bool) -> Layout {
        Layout {
            repo: "/infradev/repo".into(),
            probes: with_probes.then(|| "/infradev/probes".into()),
            lib: "/infradev/lib".into(),
            spec: "/infradev/spec.json".into(),
            out: "/infradev/out".into(),
            scratch: "/tmp".into(),
        }
    }
}

/// `python3 -m pytest …` for a phase. pytest reads only our own config (`-c`), never the
/// repository's, and keeps going past collection errors so one broken file cannot hide the
/// results of the others.
pub fn pytest_argv(
    python: &str,
    layout: &Layout,
    phase: Phase,
    plugins: &[String],
    targets: &[String],
) -> Vec<String> {
    let root = match (phase, &layout.probes) {
        (Phase::Probes, Some(p)) => p.clone(),
        _ => layout.repo.clone(),
    };
    let mut argv: Vec<String> = vec![
        python.into(),
        "-m".into(),
        "pytest".into(),
        "-c".into(),
        format!("{}/pytest.ini", layout.lib),
        format!("--rootdir={root}"),
        "-p".into(),
        "infradev_pytest".into(),
        "-p".into(),
        "no:cacheprovider".into(),
        "--continue-on-collection-errors".into(),
        "-q".into(),
    ];
    for plugin in plugins {
        argv.extend(["-p".into(), plugin.clone()]);
    }
    if phase == Phase::Probes {
        argv.push(format!("--confcutdir={root}"));
    }
    argv.extend(targets.iter().map(|t| match phase {
        Phase::Probes => format!("{root}/{t}"),
        Phase::Tests => t.clone(),
    }));
    argv
}

/// The whole environment of a phase: nothing is inherited from the host. `task_env` (the
/// task's own variables, never one of these names: the manifest refuses them) comes first,
/// so ours win.
pub fn sandbox_env(layout: &Layout, task_env: &[(String, String)]) -> Vec<(String, String)> {
    let mut env = vec![
        ("PYTHONPATH", format!("{}:{}", layout.lib, layout.repo)),
        ("INFRADEV_SPEC", layout.spec.clone()),
        ("INFRADEV_EVENTS", format!("{}/events.jsonl", layout.out)),
        ("PYTHONDONTWRITEBYTECODE", "1".into()),
        ("PYTHONNOUSERSITE", "1".into()),
        ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1".into()),
        ("HOME", layout.scratch.clone()),
        ("TMPDIR", layout.scratch.clone()),
        ("PATH", "/usr/local/bin:/usr/bin:/bin".into()),
        ("LANG", "C.UTF-8".into()),
    ];
    if let Some(p) = &layout.probes {
        env.push(("INFRADEV_PROBES", p.clone()));
    }
    let ours: Vec<(String, String)> = env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    let mut all: Vec<(String, String)> = task_env
        .iter()
        .filter(|(k, _)| !ours.iter().any(|(o, _)| o == k))
        .cloned()
        .collect();
    all.extend(ours);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_run_from_their_own_root_and_never_see_repository_conftests() {
        let argv = pytest_argv(
            "python3",
            &Layout::container(true),
            Phase::Probes,
            &[],
            &["test_state.py::test_a".into()],
        );
        assert_eq!(
            argv.join(" "),
            "python3 -m pytest -c /infradev/lib/pytest.ini --rootdir=/infradev/probes -p infradev_pytest \
             -p no:cacheprovider --continue-on-collection-errors -q --confcutdir=/infradev/probes \
             /infradev/probes/test_state.py::test_a"
        );
    }

    #[test]
    fn tests_run_from_the_repository_by_node_id() {
        let argv = pytest_argv(
            "python3",
            &Layout::container(false),
            Phase::Tests,
            &["pytest_asyncio".into()],
            &["tests/t.py::a".into()],
        );
        assert!(argv.contains(&"--rootdir=/infradev/repo".to_owned()));
        assert_eq!(argv.last().unwrap(), "tests/t.py::a");
        assert!(!argv.iter().any(|a| a.starts_with("--confcutdir")));
        assert!(argv.windows(2).any(|w| w == ["-p", "pytest_asyncio"]));
    }

    #[test]
    fn the_environment_is_complete_and_inherits_nothing() {
        let env = sandbox_env(&Layout::container(false), &[]);
        let keys: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert!(keys.contains(&"PYTEST_DISABLE_PLUGIN_AUTOLOAD"));
        assert!(!keys.contains(&"INFRADEV_PROBES"));
        assert!(
            !keys
                .iter()
                .any(|k| k.contains("TOKEN") || k.contains("SECRET"))
        );
    }
}
