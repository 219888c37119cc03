//! Webhook intake over loopback HTTP: `infradev serve` (release binary, durable SQLite store)
//! against a Python peer receiver (gidgethub + aiohttp: verify, parse, 202, store nothing),
//! both loaded by `wrk` in the same run on the same machine with the real 28 KB signed
//! `pull_request` `opened` payload and a unique `X-GitHub-Delivery` per request.
//!
//! Targets (the issue's): at least 2.5× the peer's deliveries/s while durable, p99 under 10 ms,
//! server RSS under 64 MiB with 1,000 queued jobs, and from a delivery to the `in_progress`
//! check at (the fake) GitHub a p50 under 50 ms.
//!
//! `cargo bench --bench intake`. Needs `wrk` (installed with apt-get when missing and root) and
//! Python 3 with venv; the peer's venv is made under target/bench-venv from PyPI when missing.
//! Everything listens on 127.0.0.1; every load is bounded in time.

#[allow(dead_code, unused_imports)]
#[path = "../tests/support/fake_github/mod.rs"]
mod fake_github;
#[allow(dead_code)]
#[path = "../tests/support/payloads.rs"]
mod payloads;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fake_github::FakeGitHub;
use futures_util::StreamExt;
use infradev::service::store::{JobState, Store};
use payloads::Author;
use secrecy::{ExposeSecret, SecretString};

const SECRET: &str = "intake-bench-secret";
/// wrk's load: the same for both receivers.
const THREADS: u32 = 2;
const CONNECTIONS: u32 = 32;
const DURATION_S: u32 = 10;
const WARMUP_S: u32 = 2;
/// Measured runs per receiver, alternated so drift on a shared machine hits both alike.
const ROUNDS: usize = 2;
const QUEUED_JOBS: u64 = 1_000;
const LATENCY_PRS: u64 = 20;

const TARGET_RATIO: f64 = 2.5;
const TARGET_P99_MS: f64 = 10.0;
const TARGET_RSS_MIB: f64 = 64.0;
const TARGET_IN_PROGRESS_P50_MS: f64 = 50.0;

const INSTALLATION: u64 = 7_777_777;
const REPO_FULL: &str = "infradev-mirrors/minicache";
const TASK: &str = "example-block-allocator";

fn main() {
    // `cargo test --all-targets` builds and runs bench targets too; measure only under `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        println!("intake: not measuring outside `cargo bench`");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run());
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture() -> PathBuf {
    PathBuf::from(payloads::FIXTURES).join("pull_request/opened.json")
}

async fn run() {
    let wrk = ensure_wrk();
    let python = ensure_venv();
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let body_path = fixture();
    let body = std::fs::read(&body_path).expect("the pull_request fixture");
    let signature = infradev::service::webhook::sign(&SecretString::from(SECRET.to_owned()), &body);
    let secret_file = scratch.path().join("webhook-secrets");
    std::fs::write(&secret_file, SECRET).expect("write the secret");

    let fake = FakeGitHub::start().await;
    fake.add_installation(INSTALLATION, &[REPO_FULL]);

    // The peer and our server, both up for the whole throughput part.
    let peer_port = free_port();
    let peer = Peer::start(&python, peer_port, &secret_file).await;
    let ours = Server::start(scratch.path(), "a", &fake, 0, &secret_file).await;
    let store = Store::open(&ours.store_url).await.expect("open the store");
    let info = store.info().await.expect("store info");
    println!(
        "intake: fixture {} ({} bytes), wrk -t{THREADS} -c{CONNECTIONS} -d{DURATION_S}s, {ROUNDS} rounds alternated",
        body_path.display(),
        body.len()
    );
    println!(
        "  store: sqlite journal_mode={} synchronous={} (2 = FULL) on {}",
        info.journal_mode.as_deref().unwrap_or("?"),
        info.synchronous.unwrap_or(-1),
        scratch.path().display()
    );
    println!(
        "  peer: {}, single process",
        python_versions(&python).trim()
    );
    let ceiling = sqlite_ceiling(&python, &body_path, scratch.path());
    println!(
        "  this disk, SQLite WAL synchronous=FULL, 28 KB rows, one writer alone: {:.0}/s at one commit per delivery, {:.0}/s at 32 per commit",
        ceiling.0, ceiling.1
    );
    let load = |url: String, tag: String, seconds: u32| {
        wrk_run(&wrk, url, &body_path, &signature, tag, seconds)
    };
    let peer_url = format!("http://127.0.0.1:{peer_port}/webhook");
    let ours_url = format!("http://{}/webhook", ours.addr);
    load(peer_url.clone(), "warm-peer".into(), WARMUP_S).await;
    load(ours_url.clone(), "warm-ours".into(), WARMUP_S).await;
    drain(&store).await;

    let (mut peer_runs, mut our_runs) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let p = load(peer_url.clone(), format!("peer{round}"), DURATION_S).await;
        println!("  round {}: peer      {}", round + 1, p.line());
        peer_runs.push(p);
        let o = load(ours_url.clone(), format!("ours{round}"), DURATION_S).await;
        println!("  round {}: infradev  {}", round + 1, o.line());
        // The processor catches up after the load; the next peer round must not share the CPU
        // with it.
        let took = drain(&store).await;
        println!(
            "           (the processor needed {:.1} s more to handle the deliveries stored)",
            took.as_secs_f64()
        );
        our_runs.push(o);
    }
    for run in &our_runs {
        check_stored(&store, run).await;
    }

    // RSS of the server (its own process) holding 1,000 queued jobs, after the load above.
    let (rss, hwm) = queue_jobs(&ours, &store, &fake).await;
    drop(peer);
    ours.stop();
    store.close().await;

    fake.assert_no_violations();
    drop(fake);

    // Delivery → in_progress check at a fresh fake, one worker, one PR at a time.
    let fake = FakeGitHub::start().await;
    fake.add_installation(INSTALLATION, &[REPO_FULL]);
    let latency = in_progress_latency(scratch.path(), &fake, &secret_file).await;

    // Summary.
    let sum = |runs: &[WrkResult]| runs.iter().map(|r| r.requests).sum::<u64>() as f64;
    let secs = |runs: &[WrkResult]| runs.iter().map(|r| r.duration_s()).sum::<f64>();
    let peer_rps = sum(&peer_runs) / secs(&peer_runs);
    let our_rps = sum(&our_runs) / secs(&our_runs);
    let worst =
        |f: fn(&WrkResult) -> f64, runs: &[WrkResult]| runs.iter().map(f).fold(0.0, f64::max);
    let (p50, p99) = (
        worst(|r| r.p50_ms, &our_runs),
        worst(|r| r.p99_ms, &our_runs),
    );
    let (peer_p50, peer_p99) = (
        worst(|r| r.p50_ms, &peer_runs),
        worst(|r| r.p99_ms, &peer_runs),
    );
    let ratio = our_rps / peer_rps;
    let mark = |ok: bool| if ok { "MET" } else { "MISSED" };
    println!(
        "intake summary ({} s per receiver):",
        secs(&our_runs).round()
    );
    println!(
        "  peer (gidgethub + aiohttp, stores nothing)  {peer_rps:>8.0} deliveries/s  p50 {peer_p50:>6.2} ms  p99 {peer_p99:>6.2} ms"
    );
    println!(
        "  infradev serve (durable SQLite)             {our_rps:>8.0} deliveries/s  p50 {p50:>6.2} ms  p99 {p99:>6.2} ms"
    );
    println!(
        "  (durable ceiling of this disk: {:.0}/s one commit per delivery = {:.2}x the peer; {:.0}/s 32 per commit = {:.2}x)",
        ceiling.0,
        ceiling.0 / peer_rps,
        ceiling.1,
        ceiling.1 / peer_rps
    );
    println!(
        "  throughput infradev / peer        {ratio:>7.2}x   (target >= {TARGET_RATIO}x)   {}",
        mark(ratio >= TARGET_RATIO)
    );
    println!(
        "  infradev latency p50 / p99        {p50:.2} / {p99:.2} ms   (target p99 < {TARGET_P99_MS} ms)   {}",
        mark(p99 < TARGET_P99_MS)
    );
    println!(
        "  server RSS, {QUEUED_JOBS} queued jobs      {rss:>7.1} MiB   (target < {TARGET_RSS_MIB} MiB)   {}   (peak during the run {hwm:.1} MiB)",
        mark(rss < TARGET_RSS_MIB)
    );
    println!(
        "  delivery -> in_progress p50       {:>7.1} ms   (target < {TARGET_IN_PROGRESS_P50_MS} ms)   {}   (max {:.1} ms; -> queued check p50 {:.1} ms; {LATENCY_PRS} PRs)",
        latency.in_progress_p50,
        mark(latency.in_progress_p50 < TARGET_IN_PROGRESS_P50_MS),
        latency.in_progress_max,
        latency.queued_p50,
    );
}

// ---- tools ---------------------------------------------------------------------------------

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

/// `wrk` from the PATH, installed from Debian when missing and we are root.
fn ensure_wrk() -> PathBuf {
    if let Some(wrk) = on_path("wrk") {
        return wrk;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        eprintln!("intake: wrk is missing; apt-get install -y wrk");
        let ok = Command::new("apt-get")
            .args(["install", "-y", "-q", "wrk"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success());
        if ok && let Some(wrk) = on_path("wrk") {
            return wrk;
        }
    }
    panic!("intake: needs wrk on the PATH (Debian: apt-get install wrk)");
}

/// The peer's interpreter: target/bench-venv with gidgethub and aiohttp from PyPI.
fn ensure_venv() -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target dir")
        .to_path_buf();
    let venv = target.join("bench-venv");
    let python = venv.join("bin/python");
    let ready = || {
        Command::new(&python)
            .args(["-c", "import gidgethub, aiohttp"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ready() {
        return python;
    }
    eprintln!(
        "intake: making {} (pip install gidgethub aiohttp)",
        venv.display()
    );
    let ok = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "gidgethub", "aiohttp"])
            .status()
            .is_ok_and(|s| s.success());
    assert!(
        ok && ready(),
        "intake: cannot make the peer's venv {} (needs python3 -m venv and PyPI)",
        venv.display()
    );
    python
}

fn python_versions(python: &Path) -> String {
    let out = Command::new(python)
        .args([
            "-c",
            "import sys, gidgethub, aiohttp; print(f'Python {sys.version.split()[0]}, gidgethub {gidgethub.__version__}, aiohttp {aiohttp.__version__}')",
        ])
        .output()
        .expect("run the venv's python");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// benches/intake/sqlite_ceiling.py: what a durable SQLite intake can do on this disk (rows per
/// second at one commit per delivery, and at 32 per commit).
fn sqlite_ceiling(python: &Path, body: &Path, dir: &Path) -> (f64, f64) {
    let out = Command::new(python)
        .arg(root().join("benches/intake/sqlite_ceiling.py"))
        .arg(body)
        .arg(dir)
        .output()
        .expect("run sqlite_ceiling.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("SQLITE_CEILING "))
        .unwrap_or_else(|| {
            panic!(
                "sqlite_ceiling.py printed no result:\n{stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let field = |name: &str| -> f64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    (field("one_per_commit"), field("group_of_32"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

// ---- the two receivers ---------------------------------------------------------------------

struct Peer(Child);

impl Peer {
    async fn start(python: &Path, port: u16, secret_file: &Path) -> Peer {
        let child = Command::new(python)
            .arg(root().join("benches/intake/peer.py"))
            .arg(port.to_string())
            .arg(secret_file)
            .stdin(Stdio::null())
            .spawn()
            .expect("start the Python peer");
        let peer = Peer(child);
        let url = format!("http://127.0.0.1:{port}/healthz");
        let started = Instant::now();
        while !reqwest::get(&url)
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the Python peer did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        peer
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `infradev serve` (the release binary cargo bench builds) on a fresh SQLite file.
struct Server {
    child: Child,
    addr: SocketAddr,
    store_url: String,
    log: PathBuf,
}

impl Server {
    async fn start(
        scratch: &Path,
        name: &str,
        fake: &FakeGitHub,
        concurrency: usize,
        secret_file: &Path,
    ) -> Server {
        let dir = scratch.join(format!("server-{name}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let key = dir.join("app.pem");
        std::fs::write(&key, fake.private_key_pem().expose_secret()).expect("write the key");
        let store_url = format!("sqlite://{}", dir.join("infradev.db").display());
        let config = format!(
            r#"listen = "127.0.0.1:0"
root = "{root}"
work_dir = "{work}"
[github]
api_url = "{api}"
app_id = {app_id}
private_key_file = "{key}"
webhook_secrets_file = "{secrets}"
[store]
url = "{store_url}"
[worker]
executor = "local"
concurrency = {concurrency}
[reconcile]
redeliver_failed = false
"#,
            root = root().display(),
            work = dir.join("work").display(),
            api = fake.url(),
            app_id = fake.app_id(),
            key = key.display(),
            secrets = secret_file.display(),
        );
        let config_path = dir.join("infradev.toml");
        std::fs::write(&config_path, config).expect("write the config");
        let log = dir.join("serve.log");
        let child = Command::new(env!("CARGO_BIN_EXE_infradev"))
            .arg("serve")
            .arg("--config")
            .arg(&config_path)
            .env_remove("INFRADEV_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the server's log"))
            .spawn()
            .expect("start infradev serve");
        let started = Instant::now();
        let addr = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(addr) = text
                .lines()
                .find_map(|l| l.strip_prefix("infradev: listening on http://"))
            {
                break addr.trim().parse().expect("the listening address");
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "infradev serve did not start:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        Server {
            child,
            addr,
            store_url,
            log,
        }
    }

    /// VmRSS and VmHWM of the server process, in MiB.
    fn rss_mib(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc/<pid>/status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .map(|kib| kib / 1024.0)
                .unwrap_or_else(|| panic!("no {name} in /proc/<pid>/status"))
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// Ctrl-C, as an operator would; killed if it does not stop within 10 s.
    fn stop(mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---- wrk -----------------------------------------------------------------------------------

/// One wrk run, from the INTAKE_RESULT line benches/intake/wrk.lua prints.
struct WrkResult {
    tag: String,
    requests: u64,
    duration_us: u64,
    non_2xx: u64,
    socket_errors: u64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// (thread, requests it generated): delivery ids are `<tag>-<thread>-<1..=n>`.
    sent: Vec<(u32, u64)>,
}

impl WrkResult {
    fn duration_s(&self) -> f64 {
        self.duration_us as f64 / 1e6
    }

    fn accepted(&self) -> u64 {
        self.requests - self.non_2xx
    }

    fn line(&self) -> String {
        format!(
            "{:>7.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms  max {:>7.2} ms  ({} answers, {} not 2xx, {} socket errors)",
            self.requests as f64 / self.duration_s(),
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            self.requests,
            self.non_2xx,
            self.socket_errors
        )
    }
}

async fn wrk_run(
    wrk: &Path,
    url: String,
    body: &Path,
    signature: &str,
    tag: String,
    seconds: u32,
) -> WrkResult {
    let out = tokio::process::Command::new(wrk)
        .arg(format!("-t{THREADS}"))
        .arg(format!("-c{CONNECTIONS}"))
        .arg(format!("-d{seconds}s"))
        .arg("--latency")
        .arg("-s")
        .arg(root().join("benches/intake/wrk.lua"))
        .arg(&url)
        .arg("--")
        .arg(body)
        .arg(signature)
        .arg(&tag)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run wrk");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("INTAKE_RESULT "))
        .unwrap_or_else(|| {
            panic!(
                "wrk printed no result:\n{stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let field = |name: &str| -> &str {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    let num = |name: &str| -> u64 { field(name).parse().expect("a number") };
    let ms = |name: &str| num(name) as f64 / 1000.0;
    let sent = field("sent")
        .split(',')
        .map(|t| {
            let (thread, n) = t.split_once(':').expect("thread:count");
            (thread.parse().expect("thread"), n.parse().expect("count"))
        })
        .collect();
    WrkResult {
        tag,
        requests: num("requests"),
        duration_us: num("duration_us"),
        non_2xx: num("non_2xx"),
        socket_errors: num("connect") + num("read") + num("write") + num("timeout"),
        p50_ms: ms("p50_us"),
        p99_ms: ms("p99_us"),
        max_ms: ms("max_us"),
        sent,
    }
}

// ---- checks on our store -------------------------------------------------------------------

/// Waits until the processor has handled every stored delivery; returns how long that took.
async fn drain(store: &Store) -> Duration {
    let started = Instant::now();
    while !store
        .unprocessed_deliveries(1)
        .await
        .expect("unprocessed deliveries")
        .is_empty()
    {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the processor did not catch up within 5 minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    started.elapsed()
}

/// Every delivery answered 2xx is in the store: looks up each id wrk generated.
async fn check_stored(store: &Store, run: &WrkResult) {
    let ids: Vec<String> = run
        .sent
        .iter()
        .flat_map(|&(thread, n)| (1..=n).map(move |i| format!("{}-{thread}-{i}", run.tag)))
        .collect();
    let generated = ids.len();
    let stored = futures_util::stream::iter(ids)
        .map(|id| async move {
            store
                .get_delivery(&id)
                .await
                .expect("get_delivery")
                .is_some()
        })
        .buffer_unordered(8)
        .filter(|found| std::future::ready(*found))
        .count()
        .await as u64;
    println!(
        "  {}: {} answered 2xx, {stored} stored ({generated} generated, the rest still in flight when wrk stopped)",
        run.tag,
        run.accepted()
    );
    assert!(
        stored >= run.accepted(),
        "{}: {} deliveries were acknowledged but only {stored} are in the store",
        run.tag,
        run.accepted()
    );
}

/// Opens `QUEUED_JOBS` agent PRs with a task (no worker grades them), waits until every job is
/// queued and its queued check created at the fake, and returns the server's VmRSS and VmHWM.
async fn queue_jobs(server: &Server, store: &Store, fake: &FakeGitHub) -> (f64, f64) {
    let http = reqwest::Client::new();
    let url = format!("http://{}/webhook", server.addr);
    let before = store
        .count_jobs_by_state()
        .await
        .expect("count jobs")
        .queued;
    let started = Instant::now();
    futures_util::stream::iter(1..=QUEUED_JOBS)
        .map(|n| {
            let (http, url) = (&http, &url);
            async move {
                let payload = payloads::pull_request(
                    "opened.json",
                    INSTALLATION,
                    n,
                    &format!("{n:040x}"),
                    TASK,
                    Author::Agent,
                );
                let (body, signature) = payloads::signed(&payload, SECRET);
                let status = http
                    .post(url)
                    .header("content-type", "application/json")
                    .header("x-github-event", "pull_request")
                    .header("x-github-delivery", format!("queue-{n}"))
                    .header("x-hub-signature-256", signature)
                    .body(body)
                    .send()
                    .await
                    .expect("POST /webhook")
                    .status();
                assert_eq!(status.as_u16(), 202);
            }
        })
        .buffer_unordered(8)
        .collect::<()>()
        .await;
    loop {
        let queued = store
            .count_jobs_by_state()
            .await
            .expect("count jobs")
            .queued
            - before;
        let pending = store.pending_outbox_count().await.expect("outbox count");
        if queued >= QUEUED_JOBS && pending == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "{queued} of {QUEUED_JOBS} jobs queued, {pending} reports pending after 5 minutes; log: {}",
            server.log.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let checks = fake.check_runs(REPO_FULL).len();
    let (rss, hwm) = server.rss_mib();
    let counts = store.count_jobs_by_state().await.expect("count jobs");
    println!(
        "  {QUEUED_JOBS} agent PRs opened in {:.1} s: {} jobs {} ({} queued check runs at the fake); server VmRSS {rss:.1} MiB, VmHWM {hwm:.1} MiB",
        started.elapsed().as_secs_f64(),
        counts.get(JobState::Queued),
        JobState::Queued.as_str(),
        checks,
    );
    (rss, hwm)
}

struct Latency {
    in_progress_p50: f64,
    in_progress_max: f64,
    queued_p50: f64,
}

/// A fresh server with one worker; one agent PR at a time: the time from sending the delivery
/// to the fake receiving the `in_progress` PATCH of its check run. The fake has no such pull, so
/// each grade stops at the fetch and the worker is free again within milliseconds.
async fn in_progress_latency(scratch: &Path, fake: &FakeGitHub, secret_file: &Path) -> Latency {
    let server = Server::start(scratch, "b", fake, 1, secret_file).await;
    let http = reqwest::Client::new();
    let url = format!("http://{}/webhook", server.addr);
    let (mut in_progress, mut queued) = (Vec::new(), Vec::new());
    for i in 0..LATENCY_PRS {
        let number = 5_000 + i;
        let head = format!("{:040x}", 0xbeef_0000 + i);
        let payload = payloads::pull_request(
            "opened.json",
            INSTALLATION,
            number,
            &head,
            TASK,
            Author::Agent,
        );
        let (body, signature) = payloads::signed(&payload, SECRET);
        let request = http
            .post(&url)
            .header("content-type", "application/json")
            .header("x-github-event", "pull_request")
            .header("x-github-delivery", format!("latency-{i}"))
            .header("x-hub-signature-256", signature)
            .body(body);
        let sent = Instant::now();
        let status = request.send().await.expect("POST /webhook").status();
        assert_eq!(status.as_u16(), 202);
        let started = Instant::now();
        let run = loop {
            if let Some(run) = fake
                .check_runs(REPO_FULL)
                .into_iter()
                .find(|r| r.head_sha == head && r.status == "completed")
            {
                break run;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no completed check run for {head} within 30 s; log: {}",
                server.log.display()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let requests = fake.requests();
        let at = |operation: &str, pick: &dyn Fn(&fake_github::RecordedRequest) -> bool| {
            requests
                .iter()
                .find(|r| r.operation == operation && pick(r))
                .unwrap_or_else(|| panic!("no {operation} request for {head}"))
                .received_at
                .duration_since(sent)
                .as_secs_f64()
                * 1000.0
        };
        let suffix = format!("/check-runs/{}", run.id);
        in_progress.push(at("checks/update", &|r| {
            r.path.ends_with(&suffix)
                && r.body.as_ref().and_then(|b| b.get("status")?.as_str()) == Some("in_progress")
        }));
        queued.push(at("checks/create", &|r| {
            r.body.as_ref().and_then(|b| b.get("head_sha")?.as_str()) == Some(head.as_str())
        }));
    }
    server.stop();
    println!(
        "  delivery -> in_progress, ms, in order: {}",
        in_progress
            .iter()
            .map(|ms| format!("{ms:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    Latency {
        in_progress_p50: median(&mut in_progress.clone()),
        in_progress_max: in_progress.iter().copied().fold(0.0, f64::max),
        queued_p50: median(&mut queued),
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}
