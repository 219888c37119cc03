//! The red team's harness (tests/redteam.rs): grades the attack branches of the example
//! repository (examples/minicache/attacks/*.patch, built by make-repo.sh) through the real
//! binary on real Docker, measures the grader from outside (exit status, peak memory, wall
//! time, the sandboxes' Docker logs), and inspects every rendering a submission could reach:
//! the terminal summary, stderr, `--json`, `--junit`, and the GitHub check run, sticky
//! comment and workflow commands rendered from the report.
//!
//! Nothing of the product is mocked; everything here only reads what the binary produced.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use infradev::grade::report::Report;

use super::{TASK, example_repo, probes_dir, root, task_dir};

/// Tight limits for the attacks: a hang costs seconds, a hog meets its limit quickly.
pub const FAST: &[(&str, &str)] = &[
    ("test_timeout_s", "5"),
    ("tests_s", "60"),
    ("probes_s", "90"),
    ("memory_mb", "256"),
];

/// Grades running at once in this test binary (each is mostly Docker and Python start-up).
const CONCURRENT_GRADES: usize = 4;
/// Past this, a grade is a hang of the grader (it is killed and the test fails).
const GRADE_DEADLINE: Duration = Duration::from_secs(420);

/// Which probes a grade runs. Attacks on the official phase run against `Interface` (the real
/// interface probe alone): a task whose probes check less than its official tests do, so the
/// official results decide the verdict. Subject attacks run against `Quick` (the interface
/// probe and the three short state probes, which the reference passes in seconds).
/// Exfiltration runs against the real probe set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probes {
    Interface,
    Quick,
    Real,
}

impl Probes {
    pub fn dir(self) -> PathBuf {
        static SETS: OnceLock<tempfile::TempDir> = OnceLock::new();
        let sets = SETS.get_or_init(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            build_probe_subset(
                &dir.path().join("interface"),
                &["test_public_interface"],
                &[],
            );
            build_probe_subset(
                &dir.path().join("quick"),
                &[
                    "test_public_interface",
                    "test_failed_allocation_leaves_shared_blocks_alone",
                    "test_reused_block_becomes_most_recently_freed",
                    "test_evicted_blocks_are_forgotten",
                ],
                // The long seeded workload of test_state.py would run (unexpected) and cost
                // its whole timeout: its source is dropped from the copy.
                &["test_refcounts_balance_across_steps"],
            );
            dir
        });
        match self {
            Probes::Interface => sets.path().join("interface"),
            Probes::Quick => sets.path().join("quick"),
            Probes::Real => probes_dir(),
        }
    }
}

/// A copy of the real probe directory keeping only the probes whose test function is in
/// `keep` (their files, and the `[[probe]]` entries of probes.toml), with the functions in
/// `drop` cut out of the copied sources.
fn build_probe_subset(dest: &Path, keep: &[&str], drop: &[&str]) {
    std::fs::create_dir_all(dest).unwrap();
    let manifest = std::fs::read_to_string(probes_dir().join("probes.toml")).unwrap();
    let mut parts = manifest.split("[[probe]]");
    let mut out = parts.next().unwrap_or_default().to_owned();
    let mut files = BTreeSet::new();
    for block in parts {
        let test = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("test = "))
            .map(|t| t.trim().trim_matches('"').to_owned())
            .unwrap_or_default();
        let (file, func) = test.split_once("::").unwrap_or((&test, ""));
        if keep.contains(&func) {
            files.insert(file.to_owned());
            out.push_str("[[probe]]");
            out.push_str(block);
        }
    }
    assert!(
        !files.is_empty(),
        "none of {keep:?} is in probes.toml any more: update tests/support/redteam.rs"
    );
    std::fs::write(dest.join("probes.toml"), out).unwrap();
    for file in files {
        let mut text = std::fs::read_to_string(probes_dir().join(&file)).unwrap();
        for func in drop {
            text = cut_function(&text, func);
        }
        std::fs::write(dest.join(&file), text).unwrap();
    }
}

/// `source` without the top-level `def name(` and everything up to the next top-level
/// statement.
fn cut_function(source: &str, name: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in source.split_inclusive('\n') {
        let top_level = !line.starts_with([' ', '\t', '\n', '#']) && !line.trim().is_empty();
        if line.starts_with(&format!("def {name}(")) {
            skipping = true;
        } else if skipping && top_level {
            skipping = false;
        }
        if !skipping {
            out.push_str(line);
        }
    }
    out
}

/// A task directory: the example task, or a copy with [`FAST`] limits.
pub fn task(fast: bool) -> PathBuf {
    static FAST_TASK: OnceLock<tempfile::TempDir> = OnceLock::new();
    if !fast {
        return task_dir();
    }
    FAST_TASK
        .get_or_init(|| super::task_variant(FAST))
        .path()
        .join(TASK)
}

/// How one grade went, seen from outside the grader.
pub struct Run {
    pub attack: String,
    /// The exit code, `None` when a signal ended the grader.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub json: String,
    pub junit: String,
    pub report: Option<Report>,
    /// Peak resident memory of the grader process, KiB (its VmHWM, polled).
    pub max_rss_kib: u64,
    pub elapsed: Duration,
    /// Killed by us after [`GRADE_DEADLINE`].
    pub hung: bool,
    /// The largest Docker log file of a sandbox seen while the grade ran (bytes), when the
    /// daemon's log files are readable here.
    pub max_docker_log: Option<u64>,
}

impl Run {
    pub fn report(&self) -> &Report {
        self.report.as_ref().unwrap_or_else(|| {
            panic!(
                "{}: no report (exit {:?}, signal {:?}, {:?}):\n{}\n{}",
                self.attack, self.code, self.signal, self.elapsed, self.stdout, self.stderr
            )
        })
    }

    /// What a reader of the failure needs: the verdict line and the whole summary.
    pub fn context(&self) -> String {
        format!(
            "attack {} (exit {:?}, signal {:?}, {:.1} s, peak RSS {} MiB):\n{}\n--- stderr ---\n{}",
            self.attack,
            self.code,
            self.signal,
            self.elapsed.as_secs_f64(),
            self.max_rss_kib / 1024,
            self.stdout,
            tail(&self.stderr, 3000)
        )
    }
}

fn tail(text: &str, n: usize) -> &str {
    let mut start = text.len().saturating_sub(n);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Options of one grade.
#[derive(Debug, Clone)]
pub struct Grade {
    pub attack: &'static str,
    pub probes: Probes,
    pub fast: bool,
    /// `ulimit -v` for the grader, KiB (bounds what a host-side runaway can take).
    pub vmem_kib: Option<u64>,
    /// Watch the sandboxes' Docker log files while the grade runs.
    pub watch_docker_logs: bool,
}

impl Grade {
    pub fn new(attack: &'static str, probes: Probes) -> Grade {
        Grade {
            attack,
            probes,
            fast: true,
            vmem_kib: None,
            watch_docker_logs: false,
        }
    }

    /// Grades `submission/<attack>` of the example repository.
    pub fn run(&self) -> Run {
        let _permit = Permit::acquire();
        let out = tempfile::tempdir().expect("temp dir");
        let (json, junit) = (
            out.path().join("report.json"),
            out.path().join("report.xml"),
        );
        let mut argv: Vec<String> = vec![env!("CARGO_BIN_EXE_infradev").into()];
        for a in [
            "--root".into(),
            root().display().to_string(),
            "grade".into(),
            "--task".into(),
            task(self.fast).display().to_string(),
            "--repo".into(),
            example_repo().display().to_string(),
            "--head".into(),
            format!("submission/{}", self.attack),
            "--executor".into(),
            "docker".into(),
            "--probes".into(),
            self.probes.dir().display().to_string(),
            "--json".into(),
            json.display().to_string(),
            "--junit".into(),
            junit.display().to_string(),
        ] {
            argv.push(a);
        }
        let mut cmd = match self.vmem_kib {
            Some(kib) => {
                let mut c = Command::new("/bin/sh");
                c.arg("-c")
                    .arg(format!("ulimit -v {kib} && exec \"$@\""))
                    .arg("sh")
                    .args(&argv);
                c
            }
            None => {
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
                c
            }
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let watcher = self.watch_docker_logs.then(DockerLogWatcher::start);
        let started = Instant::now();
        let mut child = cmd.spawn().expect("run infradev");
        let pid = child.id() as libc::pid_t;
        let reader = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = r.read_to_end(&mut buf);
                String::from_utf8_lossy(&buf).into_owned()
            })
        };
        let stdout = reader(Box::new(child.stdout.take().unwrap()));
        let stderr = reader(Box::new(child.stderr.take().unwrap()));
        let done = Arc::new(AtomicBool::new(false));
        let hung = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let watchdog = {
            let (done, hung, peak) = (done.clone(), hung.clone(), peak.clone());
            std::thread::spawn(move || {
                // The grader's high-water mark (VmHWM starts afresh at exec, unlike the
                // rusage of a child forked from this big test process).
                let status = format!("/proc/{pid}/status");
                while !done.load(Ordering::SeqCst) {
                    if let Some(kib) = std::fs::read_to_string(&status).ok().and_then(|t| {
                        t.lines()
                            .find_map(|l| l.strip_prefix("VmHWM:"))
                            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                    }) {
                        peak.fetch_max(kib, Ordering::SeqCst);
                    }
                    if started.elapsed() > GRADE_DEADLINE && !hung.swap(true, Ordering::SeqCst) {
                        // SAFETY: plain kill(2) of our own child, not reaped yet (`done`).
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        let mut status = 0;
        // SAFETY: waitpid on our own child with a valid out-pointer; std never waits for it.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        done.store(true, Ordering::SeqCst);
        let _ = watchdog.join();
        assert_eq!(waited, pid, "waitpid failed");
        let elapsed = started.elapsed();
        drop(child);
        let max_docker_log = watcher.and_then(DockerLogWatcher::stop);
        let json_text = std::fs::read_to_string(&json).unwrap_or_default();
        Run {
            attack: self.attack.to_owned(),
            code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
            signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
            stdout: stdout.join().unwrap(),
            stderr: stderr.join().unwrap(),
            report: serde_json::from_str(&json_text).ok(),
            json: json_text,
            junit: std::fs::read_to_string(&junit).unwrap_or_default(),
            max_rss_kib: peak.load(Ordering::SeqCst),
            elapsed,
            hung: hung.load(Ordering::SeqCst),
            max_docker_log,
        }
    }
}

/// A counting semaphore over the grades of this test binary.
struct Permit;

static SLOTS: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

impl Permit {
    fn acquire() -> Permit {
        let (lock, cv) = &SLOTS;
        let mut busy = lock.lock().unwrap_or_else(|e| e.into_inner());
        while *busy >= CONCURRENT_GRADES {
            busy = cv.wait(busy).unwrap_or_else(|e| e.into_inner());
        }
        *busy += 1;
        Permit
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let (lock, cv) = &SLOTS;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        cv.notify_one();
    }
}

/// Polls the log files of every running sandbox container (label `org.infradev.managed`)
/// and keeps the largest size seen: the json-file itself when this process may read the
/// daemon's data directory, else what `docker logs` serves. `None` when neither worked.
struct DockerLogWatcher {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Option<u64>>,
}

impl DockerLogWatcher {
    fn start() -> DockerLogWatcher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let max = AtomicU64::new(0);
            let mut readable = false;
            while !flag.load(Ordering::SeqCst) {
                let ids = docker_out(&[
                    "ps",
                    "-q",
                    "--no-trunc",
                    "--filter",
                    "label=org.infradev.managed=true",
                ]);
                let mut through_daemon = false;
                for id in ids.split_whitespace() {
                    let path = docker_out(&["inspect", "-f", "{{.LogPath}}", id]);
                    if let Ok(meta) = std::fs::metadata(path.trim()) {
                        readable = true;
                        max.fetch_max(meta.len(), Ordering::SeqCst);
                    } else if let Ok(out) = Command::new("docker").args(["logs", id]).output() {
                        // The daemon's files are not ours to read: what it serves is the log.
                        readable = true;
                        through_daemon = true;
                        let n = (out.stdout.len() + out.stderr.len()) as u64;
                        max.fetch_max(n, Ordering::SeqCst);
                    }
                }
                std::thread::sleep(Duration::from_millis(if through_daemon {
                    1000
                } else {
                    150
                }));
            }
            readable.then(|| max.load(Ordering::SeqCst))
        });
        DockerLogWatcher { stop, thread }
    }

    fn stop(self) -> Option<u64> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

fn docker_out(args: &[&str]) -> String {
    Command::new("docker")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

// ---- what a submission can reach ------------------------------------------------------------

/// Every rendering of one grade, labelled: what the CLI wrote, and what the GitHub App and
/// the Actions step render from the same report (pure functions of the report).
pub fn renderings(run: &Run) -> Vec<(String, String)> {
    use infradev::grade::report::github;
    let mut out = vec![
        ("summary (stdout)".to_owned(), run.stdout.clone()),
        ("stderr".to_owned(), run.stderr.clone()),
        ("--json".to_owned(), run.json.clone()),
        ("--junit".to_owned(), run.junit.clone()),
    ];
    let Some(report) = &run.report else {
        return out;
    };
    let check = github::check_run_output(report);
    out.push(("check run title".into(), check.title.clone()));
    out.push(("check run summary".into(), check.summary.clone()));
    if let Some(text) = &check.text {
        out.push(("check run text".into(), text.clone()));
    }
    for (i, a) in check.annotations.iter().enumerate() {
        out.push((format!("check run annotation {i} path"), a.path.clone()));
        out.push((format!("check run annotation {i} title"), a.title.clone()));
        out.push((
            format!("check run annotation {i} message"),
            a.message.clone(),
        ));
    }
    let history = [("0123456789abcdef".to_owned(), "unresolved".to_owned())];
    out.push((
        "sticky comment".into(),
        github::sticky_comment(&report.submission.head, Some(report), "", &history),
    ));
    let commands: String = github::step_annotations(report)
        .iter()
        .map(infradev::cli::action::workflow_command)
        .collect();
    out.push(("workflow commands (Actions log)".into(), commands));
    out
}

/// Text fields of the JSON report with their JSON paths (decoded: what `jq -r` prints).
pub fn json_strings(json: &str) -> Vec<(String, String)> {
    fn walk(v: &serde_json::Value, path: String, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::String(s) => out.push((path, s.clone())),
            serde_json::Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(x, format!("{path}[{i}]"), out);
                }
            }
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    walk(x, format!("{path}.{k}"), out);
                    out.push((format!("{path} key"), k.clone()));
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(json) {
        walk(&v, String::new(), &mut out);
    }
    out
}

/// Characters a terminal or a log viewer acts on: C0 and C1 controls and DEL, except line
/// breaks and tabs where a rendering is multi-line.
pub fn controls(text: &str, multiline: bool) -> Vec<char> {
    text.chars()
        .filter(|c| c.is_control() && !(multiline && matches!(c, '\n' | '\t')))
        .collect()
}

/// Lines a GitHub runner would read as a workflow command.
pub fn workflow_command_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.trim_start().starts_with("::"))
        .collect()
}

/// Everything in `run`'s renderings that a terminal, a log or a workflow runner would act
/// on and that we did not put there: control characters anywhere (line breaks only where a
/// rendering is multi-line), lines that are workflow commands (outside the workflow
/// commands we emit, which must each be one clean line of our own), and, in the JSON, any
/// decoded string value with control characters.
pub fn hostile_text(run: &Run) -> Vec<String> {
    let mut found = Vec::new();
    for (label, text) in renderings(run) {
        let single_line = label.contains("title") || label.contains("path");
        let bad = controls(&text, !single_line);
        if !bad.is_empty() {
            found.push(format!("{label}: control characters {bad:?}"));
        }
        if label.starts_with("workflow commands") {
            for line in text.lines() {
                let ours = [
                    "::error ",
                    "::warning ",
                    "::notice ",
                    "::error::",
                    "::warning::",
                ]
                .iter()
                .any(|p| line.starts_with(p));
                if !ours {
                    found.push(format!("{label}: a line that is not our command: {line:?}"));
                }
            }
        } else if label.starts_with("summary") || label.starts_with("stderr") {
            // What a workflow step prints: a runner reads each of these lines.
            for line in workflow_command_lines(&text) {
                found.push(format!("{label}: workflow command line {line:?}"));
            }
        }
    }
    for (path, value) in json_strings(&run.json) {
        let bad = controls(&value, true);
        let commands = workflow_command_lines(&value);
        if !bad.is_empty() || !commands.is_empty() {
            found.push(format!(
                "--json {path} (as `jq -r` prints it): control characters {bad:?}, workflow command lines {commands:?}"
            ));
        }
    }
    found
}

// ---- leaks ----------------------------------------------------------------------------------

/// What must never be recoverable from a rendering: the probes' planted canaries, every
/// distinctive line of their source (lines repeated in a public requirement text excepted),
/// and the markers our own attacks put in every free-text field they control.
pub fn secrets(extra: &[&str]) -> Vec<String> {
    let task = infradev::task::Registry::resolve(&root(), TASK, None).expect("the example task");
    let public: Vec<&str> = task
        .probes
        .probes
        .iter()
        .map(|p| p.requirement.as_str())
        .collect();
    let mut out: Vec<String> = ["PROBE-SECRET-", "INFRADEV-PROBE-CANARY"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    for (_path, text) in task.probes.sources().expect("probe sources") {
        for line in text.lines().map(str::trim) {
            if line.chars().count() >= 30 && !public.iter().any(|r| r.contains(line)) {
                out.push(line.to_owned());
            }
        }
    }
    out.extend(extra.iter().map(|s| (*s).to_owned()));
    out.sort();
    out.dedup();
    out
}

/// Every reading of the renderings a decoder could try: each field as it is, reversed, all
/// fields concatenated (chunks spread over tests or fields), and every base64 / hex token
/// decoded (and inflated when it is zlib data), in each of those.
pub fn decodings(fields: &[String]) -> Vec<String> {
    let mut texts: Vec<String> = fields.to_vec();
    texts.push(fields.concat());
    texts.push(fields.join("\n"));
    // Tokens of every field, joined: a value chunked over many test ids or messages.
    let tokens: Vec<&str> = fields
        .iter()
        .flat_map(|f| f.split(|c: char| !(c.is_ascii_alphanumeric() || "+/=_-".contains(c))))
        .filter(|t| t.len() >= 4)
        .collect();
    texts.push(tokens.concat());
    let mut out = Vec::new();
    for text in texts {
        out.push(text.chars().rev().collect::<String>());
        let mut blobs: Vec<Vec<u8>> = Vec::new();
        for token in text
            .split(|c: char| !(c.is_ascii_alphanumeric() || "+/=_-".contains(c)))
            .filter(|t| t.len() >= 12)
        {
            for engine in [
                &base64::engine::general_purpose::STANDARD,
                &base64::engine::general_purpose::STANDARD_NO_PAD,
                &base64::engine::general_purpose::URL_SAFE,
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            ] {
                if let Ok(bytes) = engine
                    .decode(token.trim_end_matches('='))
                    .or_else(|_| engine.decode(token))
                {
                    blobs.push(bytes);
                }
            }
            if token.len() % 2 == 0
                && let Ok(bytes) = hex::decode(token)
            {
                blobs.push(bytes);
            }
        }
        for blob in blobs {
            if let Some(inflated) = inflate(&blob) {
                out.push(String::from_utf8_lossy(&inflated).into_owned());
            }
            let s = String::from_utf8_lossy(&blob).into_owned();
            out.push(s.chars().rev().collect());
            out.push(s);
        }
        out.push(text);
    }
    out
}

/// zlib data inflated (by the system's Python: no inflater among our dependencies).
fn inflate(blob: &[u8]) -> Option<Vec<u8>> {
    if blob.len() < 8 || blob[0] != 0x78 {
        return None;
    }
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import sys, zlib\ntry:\n sys.stdout.buffer.write(zlib.decompress(sys.stdin.buffer.read()))\nexcept Exception:\n sys.exit(1)",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    std::io::Write::write_all(child.stdin.as_mut()?, blob).ok()?;
    drop(child.stdin.take());
    let out = child.wait_with_output().ok()?;
    out.status.success().then_some(out.stdout)
}

/// The secrets recoverable from `run`'s renderings, with where.
pub fn leaks(run: &Run, secrets: &[String]) -> Vec<String> {
    let fields: Vec<String> = renderings(run)
        .into_iter()
        .map(|(_, t)| t)
        .chain(json_strings(&run.json).into_iter().map(|(_, v)| v))
        .collect();
    let readings = decodings(&fields);
    let mut found = Vec::new();
    for secret in secrets {
        let reversed: String = secret.chars().rev().collect();
        if let Some(r) = readings
            .iter()
            .find(|r| r.contains(secret.as_str()) || r.contains(&reversed))
        {
            let at = r
                .find(secret.as_str())
                .or_else(|| r.find(&reversed))
                .unwrap_or(0);
            let mut start = at.saturating_sub(60);
            while !r.is_char_boundary(start) {
                start -= 1;
            }
            let mut end = (at + secret.len() + 60).min(r.len());
            while !r.is_char_boundary(end) {
                end += 1;
            }
            found.push(format!("{secret:?} in …{:?}…", &r[start..end]));
        }
    }
    found
}

// ---- the plan: every grade of the suite, started together ----------------------------------

/// Grades of the plan running at once while the whole suite runs (the tests themselves only
/// wait for their own results).
const PREFETCH_WORKERS: usize = 4;

struct Board {
    started: bool,
    queued: Vec<Grade>,
    running: BTreeSet<&'static str>,
    done: std::collections::BTreeMap<&'static str, Result<Arc<Run>, String>>,
}

static BOARD: (Mutex<Board>, Condvar) = (
    Mutex::new(Board {
        started: false,
        queued: Vec::new(),
        running: BTreeSet::new(),
        done: std::collections::BTreeMap::new(),
    }),
    Condvar::new(),
);

/// Whether the test binary runs the whole suite (no name filter): then every grade of the
/// plan starts at once instead of two at a time as libtest schedules the tests.
fn whole_suite() -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    !args.iter().any(|a| !a.starts_with('-'))
}

/// The run of `attack`, from `plan` (the suite's grades, longest first). With the whole suite
/// running, the first call starts every grade of the plan on [`PREFETCH_WORKERS`] threads;
/// otherwise only this one is graded.
pub fn graded(plan: fn() -> Vec<Grade>, attack: &str) -> Arc<Run> {
    let (lock, cv) = &BOARD;
    let mut board = lock.lock().unwrap_or_else(|e| e.into_inner());
    if !board.started {
        board.started = true;
        if whole_suite() {
            board.queued = plan();
            board.queued.reverse(); // popped from the end: longest first
            for _ in 0..PREFETCH_WORKERS {
                std::thread::spawn(worker);
            }
        }
    }
    loop {
        if let Some(run) = board.done.get(attack) {
            return run
                .clone()
                .unwrap_or_else(|e| panic!("grading {attack} failed: {e}"));
        }
        let pending =
            board.running.contains(attack) || board.queued.iter().any(|g| g.attack == attack);
        if !pending {
            let grade = plan()
                .into_iter()
                .find(|g| g.attack == attack)
                .unwrap_or_else(|| panic!("{attack} is not in the plan"));
            board.running.insert(grade.attack);
            drop(board);
            let run = run_caught(&grade);
            board = lock.lock().unwrap_or_else(|e| e.into_inner());
            board.running.remove(grade.attack);
            board.done.insert(grade.attack, run);
            cv.notify_all();
            continue;
        }
        board = cv.wait(board).unwrap_or_else(|e| e.into_inner());
    }
}

fn worker() {
    let (lock, cv) = &BOARD;
    loop {
        let grade = {
            let mut board = lock.lock().unwrap_or_else(|e| e.into_inner());
            match board.queued.pop() {
                Some(g) => {
                    board.running.insert(g.attack);
                    g
                }
                None => return,
            }
        };
        let run = run_caught(&grade);
        let mut board = lock.lock().unwrap_or_else(|e| e.into_inner());
        board.running.remove(grade.attack);
        board.done.insert(grade.attack, run);
        cv.notify_all();
    }
}

fn run_caught(grade: &Grade) -> Result<Arc<Run>, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| grade.run()))
        .map(Arc::new)
        .map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panicked".to_owned())
        })
}
