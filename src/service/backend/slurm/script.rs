//! The batch script one dispatch becomes (pure).
//!
//! Everything Slurm needs to place the grade is in `#SBATCH` lines, so the whole submission is
//! one text sent on sbatch's stdin: the argv of every Slurm call stays a handful of fixed,
//! shell-safe words, which keeps a `command_prefix` such as `ssh login-node` (where argv is
//! re-parsed by a remote shell) as safe as `docker exec`.
//!
//! Two quoting dialects meet in one script. sbatch reads `#SBATCH` lines with its own tokenizer
//! (`_get_argument` in sbatch's opt.c): `"…"` and `'…'` group, a backslash escapes the next
//! character even inside quotes, and an unquoted `#` starts a comment. The `exec` line is read
//! by `/bin/sh`, where single quotes are literal. Each gets its own quoting function, and values
//! with line breaks or NULs are refused before either runs: a line break would end an
//! `#SBATCH` directive early and let the rest of a value become a directive or a command.

use std::path::Path;

use super::SlurmConfig;
use crate::service::backend::{BackendError, Submission};

/// Quotes `value` as one word for POSIX `sh`. Words made only of characters sh never treats
/// specially are left bare (readable scripts); everything else is single-quoted, with each `'`
/// written as `'\''`. Not for `#SBATCH` lines (see [`sbatch_quote`]).
pub fn sh_quote(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b));
    if plain {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

/// Quotes `value` as one argument of an `#SBATCH` line: double quotes, with `\` and `"`
/// backslash-escaped (sbatch honours backslashes inside quotes, unlike sh).
pub fn sbatch_quote(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', r"\\").replace('"', "\\\""))
}

/// Refuses a value that cannot sit on one line of the script.
fn one_line<'a>(what: &str, value: &'a str) -> Result<&'a str, BackendError> {
    if value.contains(['\n', '\r', '\0']) {
        return Err(BackendError::Rejected(format!(
            "cannot write the Slurm batch script: {what} contains a line break or NUL: {value:?}"
        )));
    }
    Ok(value)
}

fn utf8_path<'a>(what: &str, path: &'a Path) -> Result<&'a str, BackendError> {
    let text = path.to_str().ok_or_else(|| {
        BackendError::Rejected(format!(
            "cannot write the Slurm batch script: {what} is not UTF-8: {}",
            path.display()
        ))
    })?;
    one_line(what, text)
}

/// Checks the bundle directory as the nodes see it: absolute, one line, and free of the two
/// characters that change the meaning of sbatch's `--output` (`%` starts a filename pattern,
/// `\` turns patterns off), so `slurm-%j.out` lands where the server looks for it.
pub(super) fn check_node_bundle_path(what: &str, path: &Path) -> Result<(), BackendError> {
    let text = utf8_path(what, path)?;
    if !path.is_absolute() {
        return Err(BackendError::Rejected(format!(
            "{what} must be an absolute path, got {text:?}"
        )));
    }
    if text.contains(['%', '\\']) {
        return Err(BackendError::Rejected(format!(
            "{what} must not contain '%' or '\\' (sbatch reads them as --output patterns): {text:?}"
        )));
    }
    Ok(())
}

/// Slurm's `--time` in whole minutes: the grade's own limit plus `slack_s`, rounded up, at least
/// one minute (Slurm's granularity; `--time=0` would mean "no limit" on some sites).
pub fn time_limit_minutes(limit: std::time::Duration, slack_s: u64) -> u64 {
    let secs = limit
        .as_secs()
        .saturating_add(u64::from(limit.subsec_nanos() > 0))
        .saturating_add(slack_s);
    secs.div_ceil(60).max(1)
}

/// The Slurm constraint expression for a task's labels: every label but `gpu` (which `--gres`
/// already says), joined with `&` (all required). `None` when nothing is left.
///
/// Labels must be plain words (`[A-Za-z0-9_.:-]`): a `|`, `&`, `*`, `[` or space inside one would
/// change the expression's meaning rather than name a feature.
pub fn constraint(labels: &[String]) -> Result<Option<String>, BackendError> {
    let mut features = Vec::new();
    for label in labels.iter().filter(|l| l.as_str() != "gpu") {
        let plain = !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b));
        if !plain {
            return Err(BackendError::Rejected(format!(
                "task label {label:?} cannot be a Slurm constraint (allowed: letters, digits, _ . : -)"
            )));
        }
        if !features.contains(label) {
            features.push(label.clone());
        }
    }
    Ok((!features.is_empty()).then(|| features.join("&")))
}

/// The batch script for one dispatch: `#SBATCH` lines that place it (GPUs, CPUs, memory, time,
/// partition, constraints), keep it requeueable after a node failure and keep the output of
/// every run (`--open-mode=append`), then `exec infradev job run …` on the node.
///
/// `bundle_on_node` is the dispatch's bundle directory as the nodes see it (see
/// [`super::Slurm::bundle_on_node`]); the job runs there, and Slurm writes `slurm-<id>.out`
/// there.
///
/// Fails with [`BackendError::Rejected`] when a value cannot be written safely: a line break
/// anywhere, a relative or pattern-bearing bundle path, a label that is not a plain feature
/// name, or a `node_executor` other than `docker` or `local`.
pub fn render_script(
    sub: &Submission,
    bundle_on_node: &Path,
    cfg: &SlurmConfig,
) -> Result<String, BackendError> {
    check_node_bundle_path("the bundle directory on the node", bundle_on_node)?;
    cfg.check_executor()?;
    let bundle = utf8_path("the bundle directory on the node", bundle_on_node)?;
    let infradev = utf8_path("node_infradev", &cfg.node_infradev)?;
    let task = one_line("the task id", &sub.task_id)?;
    let repo = one_line("the repository", &sub.repo)?;
    let head = one_line("the head commit", &sub.head_sha)?;
    let url = one_line("the result URL", &sub.result_url)?;
    let in_bundle = |name: &str| bundle_on_node.join(name).display().to_string();
    let p = &sub.placement;

    let mut sbatch: Vec<String> = vec![
        format!("--job-name={}", sbatch_quote(&sub.name())),
        format!(
            "--comment={}",
            sbatch_quote(&format!("infradev job {}", sub.job_id))
        ),
    ];
    if p.gpus > 0 {
        sbatch.push(format!("--gres=gpu:{}", p.gpus));
    }
    sbatch.push(format!("--cpus-per-task={}", p.cpus.max(1)));
    // `--mem=0` means "all of the node's memory" to Slurm: a task without a memory figure gets
    // the partition's default instead.
    if p.memory_mb > 0 {
        sbatch.push(format!("--mem={}M", p.memory_mb));
    }
    sbatch.push(format!(
        "--time={}",
        time_limit_minutes(p.time_limit, cfg.time_slack_s)
    ));
    // Explicit: the site's JobRequeue default decides otherwise (Debian's is 1, ours is 0).
    sbatch.push("--requeue".to_owned());
    // A requeued run appends to the first run's output instead of truncating it.
    sbatch.push("--open-mode=append".to_owned());
    sbatch.push(format!(
        "--output={}",
        sbatch_quote(&in_bundle("slurm-%j.out"))
    ));
    // The default WorkDir is sbatch's cwd on the submitting host, which need not exist on the
    // node (the job then fails with JobLaunchFailure, exit 0:53).
    sbatch.push(format!("--chdir={}", sbatch_quote(bundle)));
    if let Some(partition) = &cfg.partition {
        sbatch.push(format!(
            "--partition={}",
            sbatch_quote(one_line("partition", partition)?)
        ));
    }
    if cfg.constraint_from_labels
        && let Some(expr) = constraint(&p.labels)?
    {
        sbatch.push(format!("--constraint={}", sbatch_quote(&expr)));
    }

    let mut script = String::from("#!/bin/sh\n");
    script.push_str(&format!(
        "# InfraDev grade: job {} dispatch {}, task {}, {}#{} at {}.\n",
        sub.job_id,
        sub.dispatch,
        sh_quote(task),
        sh_quote(repo),
        sub.number,
        sh_quote(head)
    ));
    for option in &sbatch {
        script.push_str(&format!("#SBATCH {option}\n"));
    }
    if !cfg.extra_args.is_empty() {
        // One line, so an option and its separate value (`--account`, `ml`) stay together.
        let words = cfg
            .extra_args
            .iter()
            .map(|a| one_line("an extra_args entry", a).map(sbatch_quote))
            .collect::<Result<Vec<_>, _>>()?;
        script.push_str(&format!("#SBATCH {}\n", words.join(" ")));
    }

    let mut argv: Vec<String> = vec![
        infradev.to_owned(),
        "job".into(),
        "run".into(),
        "--root".into(),
        in_bundle("root"),
        "--repo".into(),
        in_bundle("repo.git"),
        "--task".into(),
        task.to_owned(),
        "--head".into(),
        head.to_owned(),
        "--job-id".into(),
        sub.job_id.to_string(),
        "--dispatch".into(),
        sub.dispatch.to_string(),
        "--result-url".into(),
        url.to_owned(),
        "--token-file".into(),
        in_bundle("token"),
        "--executor".into(),
        cfg.node_executor.clone(),
    ];
    if let Some(wheels) = &cfg.node_wheels {
        argv.push("--wheels".into());
        argv.push(utf8_path("node_wheels", wheels)?.to_owned());
    }
    if cfg.allow_unvalidated {
        argv.push("--allow-unvalidated".into());
    }
    argv.push("--remove-bundle".into());
    argv.push(bundle.to_owned());
    let words: Vec<String> = argv.iter().map(|w| sh_quote(w)).collect();
    script.push_str(&format!("exec {}\n", words.join(" ")));
    Ok(script)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::service::backend::Placement;

    fn cfg() -> SlurmConfig {
        SlurmConfig {
            command_prefix: vec![],
            partition: None,
            constraint_from_labels: true,
            bundle_dir: PathBuf::from("/srv/bundles"),
            node_bundle_dir: None,
            node_infradev: PathBuf::from("/opt/infradev/bin/infradev"),
            node_executor: "docker".into(),
            node_wheels: None,
            allow_unvalidated: false,
            call_timeout_s: 30,
            time_slack_s: 300,
            extra_args: vec![],
        }
    }

    fn sub() -> Submission {
        Submission {
            job_id: 42,
            dispatch: 1,
            task_id: "vllm-fix-kv-cache".into(),
            repo: "agents/vllm".into(),
            number: 7,
            head_sha: "0123456789abcdef0123456789abcdef01234567".into(),
            placement: Placement {
                gpus: 4,
                memory_mb: 64000,
                cpus: 8,
                time_limit: Duration::from_secs(3600),
                labels: vec!["gpu".into(), "h100".into(), "nvlink".into()],
            },
            result_url: "https://grader.example/jobs/42/result".into(),
        }
    }

    #[test]
    fn sh_quote_table() {
        let cases = [
            ("plain-word_1.2", "plain-word_1.2"),
            ("/a/b:c=d@e%f+g,h", "/a/b:c=d@e%f+g,h"),
            ("", "''"),
            ("two words", "'two words'"),
            ("it's", r"'it'\''s'"),
            ("$(rm -rf /)", "'$(rm -rf /)'"),
            ("`id`;x&y|z", "'`id`;x&y|z'"),
            ("a\"b\\c", "'a\"b\\c'"),
            ("https://h/x?a=1&b=2", "'https://h/x?a=1&b=2'"),
            ("*", "'*'"),
            ("~root", "'~root'"),
        ];
        for (input, want) in cases {
            assert_eq!(sh_quote(input), want, "sh_quote({input:?})");
        }
    }

    /// What `sh` makes of a quoted word, by running it: the quoting is proven, not assumed.
    #[test]
    fn sh_quote_round_trips_through_sh() {
        let nasty = [
            "it's",
            "$(echo pwned)",
            "a b\tc",
            "'",
            "''",
            "\\",
            "\"$HOME\"",
            "*",
            "x;y",
        ];
        for value in nasty {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", sh_quote(value)))
                .output()
                .expect("sh");
            assert_eq!(String::from_utf8_lossy(&out.stdout), value);
        }
    }

    #[test]
    fn sbatch_quote_table() {
        assert_eq!(sbatch_quote("gpu"), "\"gpu\"");
        assert_eq!(
            sbatch_quote("a \"b\" # c"),
            "\"a \\\"b\\\" # c\"",
            "quotes escaped, # kept inside quotes"
        );
        assert_eq!(sbatch_quote(r"back\slash"), r#""back\\slash""#);
    }

    #[test]
    fn full_script() {
        let mut cfg = cfg();
        cfg.partition = Some("gpu".into());
        cfg.node_wheels = Some(PathBuf::from("/shared/wheels"));
        cfg.extra_args = vec!["--account".into(), "ml team".into()];
        let script = render_script(&sub(), Path::new("/shared/b/42-1"), &cfg).unwrap();
        let want = "\
#!/bin/sh
# InfraDev grade: job 42 dispatch 1, task vllm-fix-kv-cache, agents/vllm#7 at 0123456789abcdef0123456789abcdef01234567.
#SBATCH --job-name=\"infradev-42-1\"
#SBATCH --comment=\"infradev job 42\"
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=8
#SBATCH --mem=64000M
#SBATCH --time=65
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=\"/shared/b/42-1/slurm-%j.out\"
#SBATCH --chdir=\"/shared/b/42-1\"
#SBATCH --partition=\"gpu\"
#SBATCH --constraint=\"h100&nvlink\"
#SBATCH \"--account\" \"ml team\"
exec /opt/infradev/bin/infradev job run --root /shared/b/42-1/root --repo /shared/b/42-1/repo.git \
--task vllm-fix-kv-cache --head 0123456789abcdef0123456789abcdef01234567 --job-id 42 --dispatch 1 \
--result-url https://grader.example/jobs/42/result --token-file /shared/b/42-1/token --executor docker \
--wheels /shared/wheels --remove-bundle /shared/b/42-1
";
        assert_eq!(script, want);
    }

    #[test]
    fn cpu_only_grade_has_no_gres_and_defaults() {
        let mut s = sub();
        s.placement.gpus = 0;
        s.placement.labels = vec![];
        s.placement.memory_mb = 0;
        s.placement.cpus = 0;
        let script = render_script(&s, Path::new("/b"), &cfg()).unwrap();
        assert!(!script.contains("--gres"), "{script}");
        assert!(
            !script.contains("--mem"),
            "--mem=0 would take the whole node: {script}"
        );
        assert!(!script.contains("--constraint"), "{script}");
        assert!(!script.contains("--partition"), "{script}");
        assert!(script.contains("#SBATCH --cpus-per-task=1\n"), "{script}");
    }

    #[test]
    fn labels_ignored_when_constraints_are_off() {
        let mut cfg = cfg();
        cfg.constraint_from_labels = false;
        let script = render_script(&sub(), Path::new("/b"), &cfg).unwrap();
        assert!(!script.contains("--constraint"), "{script}");
    }

    #[test]
    fn hostile_values_are_quoted() {
        let mut s = sub();
        s.task_id = "t'; rm -rf / #".into();
        s.result_url = "https://h/r?a=1&b=$(id)".into();
        let script = render_script(&s, Path::new("/shared/my bundles/42-1"), &cfg()).unwrap();
        assert!(
            script.contains(r"--task 't'\''; rm -rf / #'"),
            "task quoted: {script}"
        );
        assert!(
            script.contains("--result-url 'https://h/r?a=1&b=$(id)'"),
            "{script}"
        );
        assert!(
            script.contains("#SBATCH --chdir=\"/shared/my bundles/42-1\"\n"),
            "{script}"
        );
        assert!(
            script.contains("--remove-bundle '/shared/my bundles/42-1'\n"),
            "{script}"
        );
        // `sh -n` parses the whole script: one exec line, nothing else runs.
        let status = std::process::Command::new("sh")
            .arg("-nc")
            .arg(&script)
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn rejects_what_cannot_be_written() {
        type Spoil = fn(&mut Submission);
        let bad_subs: [(&str, Spoil); 5] = [
            ("task id", |s| s.task_id = "a\nb".into()),
            ("result URL", |s| {
                s.result_url = "https://h/\n#SBATCH -w evil".into()
            }),
            ("head commit", |s| s.head_sha = "abc\r".into()),
            ("repository", |s| s.repo = "o/r\0".into()),
            ("label", |s| s.placement.labels = vec!["a|b".into()]),
        ];
        for (what, spoil) in bad_subs {
            let mut s = sub();
            spoil(&mut s);
            let err = render_script(&s, Path::new("/b"), &cfg()).unwrap_err();
            assert!(
                matches!(&err, BackendError::Rejected(m) if m.contains(what)),
                "{what}: {err:?}"
            );
        }
        for bundle in ["relative/b", "/b/100%", "/b\\x", "/b\nc"] {
            let err = render_script(&sub(), Path::new(bundle), &cfg()).unwrap_err();
            assert!(
                matches!(err, BackendError::Rejected(_)),
                "{bundle}: {err:?}"
            );
        }
        let mut c = cfg();
        c.node_executor = "podman".into();
        let err = render_script(&sub(), Path::new("/b"), &c).unwrap_err();
        assert!(err.to_string().contains("podman"), "{err}");
        let mut c = cfg();
        c.extra_args = vec!["--qos=a\nb".into()];
        assert!(render_script(&sub(), Path::new("/b"), &c).is_err());
    }

    #[test]
    fn time_limit_table() {
        let cases = [
            (0, 0, 1),
            (1, 0, 1),
            (60, 0, 1),
            (61, 0, 2),
            (3600, 300, 65),
            (3599, 1, 60),
        ];
        for (limit, slack, want) in cases {
            assert_eq!(
                time_limit_minutes(Duration::from_secs(limit), slack),
                want,
                "{limit} s + {slack} s"
            );
        }
        assert_eq!(time_limit_minutes(Duration::from_millis(60_001), 0), 2);
    }

    #[test]
    fn constraint_table() {
        let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(constraint(&l(&[])).unwrap(), None);
        assert_eq!(constraint(&l(&["gpu"])).unwrap(), None);
        assert_eq!(
            constraint(&l(&["gpu", "h100", "h100", "ib-400"])).unwrap(),
            Some("h100&ib-400".into())
        );
        assert!(constraint(&l(&["a b"])).is_err());
        assert!(constraint(&l(&[""])).is_err());
    }
}
