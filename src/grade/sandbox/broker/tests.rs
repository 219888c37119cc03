//! The broker against scripted sandboxes: a fake host whose subjects and ranks are tasks of
//! this process speaking the subject's side of the protocol, and a scripted judge. Each test
//! is a hostile (or legitimate) conversation and what the broker must make of it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use tokio::task::JoinHandle;

use super::*;
use crate::grading::{Kill, Outcome};

const T: &str = "probes/test_a.py::test_one";
const T2: &str = "probes/test_a.py::test_two";

/// One end of a socket, speaking frames.
struct Peer {
    r: OwnedReadHalf,
    w: OwnedWriteHalf,
}

impl Peer {
    fn new(stream: UnixStream) -> Peer {
        let (r, w) = stream.into_split();
        Peer { r, w }
    }

    async fn read(&mut self) -> Option<Value> {
        read_frame(&mut self.r, MAX_TO_JUDGE).await.ok()
    }

    async fn send(&mut self, v: Value) {
        let _ = write_frame(&mut self.w, &v).await;
    }

    async fn send_raw(&mut self, body: &str) {
        let _ = frame::write_raw(&mut self.w, body.as_bytes()).await;
    }

    /// A request to the subject: `{"id":N,"req":R}`, exactly.
    async fn request(&mut self) -> Option<(u64, Value)> {
        let m = self.read().await?;
        assert_eq!(keys(&m), ["id", "req"], "{m}");
        Some((m["id"].as_u64().unwrap(), m["req"].clone()))
    }

    // ---- the judge's side ----

    async fn hello(&mut self) {
        self.send(json!({"op": "hello"})).await;
        assert_eq!(self.read().await.unwrap()["op"], "welcome");
        self.event(json!({"event": "session_start"})).await;
    }

    async fn event(&mut self, event: Value) {
        self.send(json!({"op": "event", "event": event})).await;
    }

    async fn start(&mut self, nodeid: &str) {
        self.event(json!({"event": "start", "nodeid": nodeid}))
            .await;
        assert_eq!(
            self.read().await.unwrap(),
            json!({"op": "started", "nodeid": nodeid})
        );
    }

    async fn result(&mut self, nodeid: &str, outcome: &str) {
        self.event(json!({"event": "result", "nodeid": nodeid, "when": "call",
                          "outcome": outcome, "exc_type": null}))
            .await;
    }

    async fn call(&mut self, id: u64, req: Value) -> Value {
        self.send(json!({"op": "call", "id": id, "req": req})).await;
        self.read().await.expect("the broker answers a call")
    }
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

type Script = Arc<dyn Fn(u32, Peer) -> BoxFuture<'static, ()> + Send + Sync>;

/// What a subject (given its generation) or a rank (given its rank) does once welcomed.
fn script<F, Fut>(f: F) -> Script
where
    F: Fn(u32, Peer) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move |n, p| Box::pin(f(n, p)))
}

/// A subject that answers every request `ok: null`.
fn plain() -> Script {
    script(|_, mut p| async move {
        while let Some((id, _)) = p.request().await {
            p.send(json!({"id": id, "ok": null})).await;
        }
    })
}

struct FakeHost {
    socket: PathBuf,
    subject: Script,
    ranks: Script,
    rank_meters: Arc<dyn Fn() -> Vec<Meter> + Send + Sync>,
    running: Vec<JoinHandle<()>>,
    rank_tasks: Vec<JoinHandle<()>>,
}

fn host(subject: Script) -> FakeHost {
    FakeHost {
        socket: PathBuf::new(),
        subject,
        ranks: plain(),
        rank_meters: Arc::new(Vec::new),
        running: Vec::new(),
        rank_tasks: Vec::new(),
    }
}

async fn connect_and_serve(path: PathBuf, n: u32, script: Script) {
    let Ok(stream) = UnixStream::connect(&path).await else {
        return;
    };
    let mut peer = Peer::new(stream);
    peer.send(json!({"op": "hello", "pid": 1, "python": "3.11.2"}))
        .await;
    if peer.read().await.is_some_and(|w| w["op"] == "welcome") {
        script(n, peer).await;
    }
}

impl SubjectHost for FakeHost {
    async fn start(&mut self, generation: u32) -> Result<(), String> {
        let task = connect_and_serve(self.socket.clone(), generation, self.subject.clone());
        self.running.push(tokio::spawn(task));
        Ok(())
    }

    async fn meter(&mut self) -> Meter {
        Meter::default()
    }

    async fn stop(&mut self) -> SubjectEnd {
        for t in self.running.drain(..) {
            t.abort();
        }
        SubjectEnd::default()
    }

    async fn start_ranks(
        &mut self,
        _group: u32,
        socket_dirs: &[PathBuf],
    ) -> Result<RankAddress, String> {
        for (rank, dir) in socket_dirs.iter().enumerate() {
            let task = connect_and_serve(dir.join(SUBJECT_SOCKET), rank as u32, self.ranks.clone());
            self.rank_tasks.push(tokio::spawn(task));
        }
        Ok(RankAddress {
            master_addr: "127.0.0.1".to_owned(),
            master_port: 29500,
        })
    }

    async fn rank_meters(&mut self) -> Vec<Meter> {
        (self.rank_meters)()
    }

    async fn stop_ranks(&mut self) -> Vec<SubjectEnd> {
        let n = self.rank_tasks.len();
        for t in self.rank_tasks.drain(..) {
            t.abort();
        }
        vec![SubjectEnd::default(); n]
    }
}

fn cfg() -> BrokerConfig {
    BrokerConfig {
        budgets: vec![(
            T.to_owned(),
            Budget {
                wall_time_s: Some(30.0),
                ..Default::default()
            },
        )],
        call_timeout: Duration::from_secs(20),
        startup_timeout: Duration::from_secs(10),
        max_reply: MAX_FRAME,
        max_callbacks: MAX_CALLBACKS_PER_CALL,
        progress: None,
    }
}

/// Serves one phase: `judge` speaks for the judge; the phase ends when it hangs up.
async fn run<F, Fut>(mut host: FakeHost, cfg: BrokerConfig, judge: F) -> Brokered
where
    F: FnOnce(Peer) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let dir = tempfile::tempdir().unwrap();
    let (judge_dir, subject_dir) = socket_dirs(dir.path()).unwrap();
    let broker = Broker::bind(&judge_dir, &subject_dir).unwrap();
    host.socket = subject_dir.join(SUBJECT_SOCKET);
    let stream = UnixStream::connect(judge_dir.join(JUDGE_SOCKET))
        .await
        .unwrap();
    let judge = tokio::spawn(judge(Peer::new(stream)));
    let serve = broker.serve(&mut host, &cfg, std::future::pending());
    let out = tokio::time::timeout(Duration::from_secs(120), serve)
        .await
        .expect("the phase ends when the judge hangs up");
    judge.await.expect("the judge's script");
    out
}

fn with_callback(cb: u64) -> Value {
    json!({"op": "call", "obj": {"$ref": 1}, "args": [{"$callback": cb}],
           "kwargs": {"$dict": []}})
}

#[tokio::test]
async fn a_reply_that_is_also_a_callback_is_the_subjects_protocol_fault() {
    // The red team's attack: a `release` answered with a reply that is also a callback, so
    // that the judge's next frame (the next test's `start`) would be relayed to the subject
    // and answered by it with a forged `started`, leaving that test unmeasured.
    let subject = script(|generation, mut p| async move {
        while let Some((id, _)) = p.request().await {
            if generation == 1 {
                p.send(json!({"id": id, "ok": null, "callback": {}})).await;
                let forwarded = p.read().await;
                if let Some(f) = forwarded {
                    p.send(json!({"id": id, "ok": null, "op": "started", "got": f}))
                        .await;
                }
            } else {
                p.send(json!({"id": id, "ok": null})).await;
            }
        }
    });
    let out = run(host(subject), cfg(), |mut j| async move {
        j.hello().await;
        j.start(T).await;
        let reply = j.call(1, json!({"op": "release", "refs": [1]})).await;
        assert_eq!(
            reply,
            json!({"id": 1, "fault": "protocol", "generation": 2})
        );
        j.result(T, "failed").await;
        // The next test's start is the broker's to answer: measurement is armed.
        j.start(T2).await;
        let reply = j.call(2, json!({"op": "release", "refs": []})).await;
        assert_eq!(keys(&reply), ["id", "ok", "subject_ns"]);
        j.result(T2, "passed").await;
    })
    .await;
    assert_eq!(out.infra_error, None);
    assert_eq!(out.results.kill_of(T), Some(Kill::Crashed));
    assert_eq!(out.results.outcome_of(T2), Some(Outcome::Passed));
    assert_eq!(out.subjects, 2);
}

#[tokio::test]
async fn subject_frames_of_any_other_shape_are_its_protocol_fault() {
    let deep = "[".repeat(MAX_FRAME_DEPTH) + &"]".repeat(MAX_FRAME_DEPTH);
    let bad: Vec<String> = vec![
        r#"{"id":ID,"ok":null,"op":"started","nodeid":"x"}"#.into(),
        r#"{"id":ID,"ok":null,"err":{"builtin":null,"classes":[]}}"#.into(),
        r#"{"id":ID,"ok":1,"ok":2}"#.into(),
        r#"{"id":ID,"ok":null,"subject_ns":1}"#.into(),
        r#"{"id":ID,"ok":null,"generation":5}"#.into(),
        r#"{"id":ID}"#.into(),
        r#"{"id":ID,"callback":{"cb":1,"args":[],"kwargs":{},"extra":1}}"#.into(),
        r#"{"id":ID,"ok":{"a":NaN}}"#.into(),
        format!(r#"{{"id":ID,"ok":{deep}}}"#),
    ];
    let n = bad.len();
    let frames = Arc::new(bad);
    let subject = {
        let frames = frames.clone();
        script(move |generation, mut p| {
            let frames = frames.clone();
            async move {
                while let Some((id, _)) = p.request().await {
                    let frame = frames[generation as usize - 1].replace("ID", &id.to_string());
                    p.send_raw(&frame).await;
                }
            }
        })
    };
    let out = run(host(subject), cfg(), move |mut j| async move {
        j.hello().await;
        for i in 0..n {
            let nodeid = format!("{T}[{i}]");
            j.start(&nodeid).await;
            let id = i as u64 + 1;
            let reply = j.call(id, json!({"op": "dir", "obj": {"$ref": 1}})).await;
            assert_eq!(
                reply,
                json!({"id": id, "fault": "protocol", "generation": i + 2}),
                "frame {i}"
            );
            j.result(&nodeid, "failed").await;
        }
    })
    .await;
    assert_eq!(out.infra_error, None, "the subject's fault, never infra");
    for i in 0..n {
        let nodeid = format!("{T}[{i}]");
        assert_eq!(
            out.results.kill_of(&nodeid),
            Some(Kill::Crashed),
            "frame {i}"
        );
    }
}

/// A subject that calls callback 1 once, then `cb` `times` times, then replies.
fn calls_back(cb: u64, times: usize) -> Script {
    script(move |_, mut p| async move {
        while let Some((id, _)) = p.request().await {
            let mut calls = vec![1];
            calls.extend(std::iter::repeat_n(cb, times));
            for cb in calls {
                p.send(json!({"id": id, "callback": {"cb": cb, "args": [2],
                                                      "kwargs": {"$dict": []}}}))
                    .await;
                let Some(answer) = p.read().await else {
                    return;
                };
                assert_eq!(keys(&answer), ["callback_ok", "id"], "{answer}");
            }
            p.send(json!({"id": id, "ok": 7})).await;
        }
    })
}

/// The judge's side of a call whose request hands out callback 1: answers every callback
/// until the call ends; returns the call's final frame and how many callbacks it served.
async fn serve_callbacks(j: &mut Peer, id: u64) -> (Value, usize) {
    j.send(json!({"op": "call", "id": id, "req": with_callback(1)}))
        .await;
    let mut served = 0;
    loop {
        let m = j.read().await.unwrap();
        if m.get("callback").is_none() {
            return (m, served);
        }
        assert_eq!(
            m,
            json!({"id": id, "callback": {"cb": m["callback"]["cb"], "args": [2],
                                          "kwargs": {"$dict": []}}})
        );
        served += 1;
        j.send(json!({"id": id, "callback_ok": null})).await;
    }
}

#[tokio::test]
async fn a_callback_never_handed_out_ends_the_call() {
    let out = run(host(calls_back(999, 1)), cfg(), |mut j| async move {
        j.hello().await;
        j.start(T).await;
        let (end, served) = serve_callbacks(&mut j, 1).await;
        // Callback 1 was handed out and reached the judge; 999 never was and did not.
        assert_eq!(served, 1);
        assert_eq!(end, json!({"id": 1, "fault": "protocol", "generation": 2}));
        j.result(T, "failed").await;
    })
    .await;
    assert_eq!(out.infra_error, None);
    assert_eq!(out.results.kill_of(T), Some(Kill::Crashed));
}

#[tokio::test]
async fn callbacks_past_the_cap_end_the_call() {
    let cfg = BrokerConfig {
        max_callbacks: 4,
        ..cfg()
    };
    let out = run(host(calls_back(1, 3)), cfg.clone(), |mut j| async move {
        j.hello().await;
        let (end, served) = serve_callbacks(&mut j, 1).await;
        assert_eq!(
            (end["ok"].clone(), served),
            (json!(7), 4),
            "at the cap: fine"
        );
    })
    .await;
    assert_eq!(out.infra_error, None);
    let out = run(host(calls_back(1, 4)), cfg, |mut j| async move {
        j.hello().await;
        j.start(T).await;
        let (end, served) = serve_callbacks(&mut j, 1).await;
        assert_eq!(served, 4);
        assert_eq!(end, json!({"id": 1, "fault": "protocol", "generation": 2}));
        j.result(T, "failed").await;
    })
    .await;
    assert_eq!(out.infra_error, None);
    assert_eq!(out.results.kill_of(T), Some(Kill::Crashed));
}

#[tokio::test]
async fn the_subjects_time_is_the_calls_wall_time_less_the_judges_callbacks() {
    let subject = script(|_, mut p| async move {
        while let Some((id, _)) = p.request().await {
            tokio::time::sleep(Duration::from_millis(150)).await;
            p.send(json!({"id": id, "callback": {"cb": 1, "args": [],
                                                  "kwargs": {"$dict": []}}}))
                .await;
            p.read().await;
            tokio::time::sleep(Duration::from_millis(150)).await;
            p.send(json!({"id": id, "ok": null})).await;
        }
    });
    run(host(subject), cfg(), |mut j| async move {
        j.hello().await;
        j.send(json!({"op": "call", "id": 1, "req": with_callback(1)}))
            .await;
        assert!(j.read().await.unwrap().get("callback").is_some());
        tokio::time::sleep(Duration::from_millis(600)).await;
        j.send(json!({"id": 1, "callback_ok": null})).await;
        let reply = j.read().await.unwrap();
        let ns = reply["subject_ns"].as_u64().unwrap();
        assert!(
            (300_000_000..850_000_000).contains(&ns),
            "the subject's 300 ms, not the judge's 600: {ns}"
        );
    })
    .await;
}

#[tokio::test]
async fn inside_a_callback_the_judge_may_answer_or_call_and_nothing_else_is_relayed() {
    // Legitimate: a nested call (handing out callback 2, which the subject then uses), a rank
    // request (refused, never relayed), then the answer.
    let subject = script(|_, mut p| async move {
        let Some((id, _)) = p.request().await else {
            return;
        };
        p.send(json!({"id": id, "callback": {"cb": 1, "args": [], "kwargs": {"$dict": []}}}))
            .await;
        let (nested, req) = p.request().await.unwrap();
        assert_eq!(req["args"][0], json!({"$callback": 2}));
        p.send(json!({"id": nested, "callback": {"cb": 2, "args": [], "kwargs": {"$dict": []}}}))
            .await;
        assert_eq!(
            p.read().await.unwrap(),
            json!({"id": nested, "callback_ok": 5})
        );
        p.send(json!({"id": nested, "ok": "nested"})).await;
        assert_eq!(
            p.read().await.unwrap(),
            json!({"id": id, "callback_err":
                                                   {"builtin": null, "classes": []}})
        );
        p.send(json!({"id": id, "ok": "outer"})).await;
    });
    run(host(subject), cfg(), |mut j| async move {
        j.hello().await;
        j.send(json!({"op": "call", "id": 1, "req": with_callback(1)}))
            .await;
        assert_eq!(j.read().await.unwrap()["callback"]["cb"], 1);
        j.send(json!({"op": "call", "id": 2, "req": with_callback(2)}))
            .await;
        assert_eq!(j.read().await.unwrap()["callback"]["cb"], 2);
        j.send(json!({"id": 2, "callback_ok": 5})).await;
        assert_eq!(j.read().await.unwrap(), json!({"id": 2, "ok": "nested"}));
        j.send(json!({"op": "ranks", "id": 3, "world_size": 2}))
            .await;
        assert_eq!(
            j.read().await.unwrap(),
            json!({"id": 3, "group": null, "fault": "refused"})
        );
        j.send(json!({"id": 1, "callback_err": {"builtin": null, "classes": []}}))
            .await;
        let reply = j.read().await.unwrap();
        assert_eq!(
            (keys(&reply), &reply["ok"]),
            (vec!["id", "ok", "subject_ns"], &json!("outer"))
        );
    })
    .await;

    // A lifecycle event while a callback is pending is never relayed to the subject: the
    // judge broke the protocol (ours), and the test is not charged for it.
    let relayed = Arc::new(AtomicBool::new(false));
    let subject = {
        let relayed = relayed.clone();
        script(move |_, mut p| {
            let relayed = relayed.clone();
            async move {
                while let Some((id, _)) = p.request().await {
                    p.send(json!({"id": id, "callback": {"cb": 1, "args": [],
                                                          "kwargs": {"$dict": []}}}))
                        .await;
                    if p.read().await.is_some() {
                        relayed.store(true, Ordering::SeqCst);
                    }
                }
            }
        })
    };
    let out = run(host(subject), cfg(), |mut j| async move {
        j.hello().await;
        j.start(T).await;
        j.send(json!({"op": "call", "id": 1, "req": with_callback(1)}))
            .await;
        assert!(j.read().await.unwrap().get("callback").is_some());
        j.event(json!({"event": "start", "nodeid": T2})).await;
        assert_eq!(
            j.read().await.unwrap(),
            json!({"id": 1, "fault": "protocol", "generation": 2})
        );
    })
    .await;
    assert!(
        !relayed.load(Ordering::SeqCst),
        "the event reached the subject"
    );
    assert!(
        out.infra_error
            .unwrap()
            .contains("judge broke the protocol")
    );
    assert_eq!(out.results.kill_of(T), None);
}

/// JSON text `depth` arrays deep (serde_json cannot build such a tree: the test's frames
/// are written and read as text).
fn nested(depth: usize) -> String {
    "[".repeat(depth) + &"]".repeat(depth)
}

#[tokio::test]
async fn frames_as_deep_as_the_canonical_limit_cross_both_ways() {
    // A reply 126 deep that the judge sends back in a 129-deep frame (serde_json's own limit
    // is 128), and frames of exactly the limit either way; one level more is the subject's
    // protocol fault.
    let subject = script(|_, mut p| async move {
        let mut n = 0;
        loop {
            let Some(raw) = read_raw(&mut p.r, MAX_FRAME).await.ok() else {
                return;
            };
            n += 1;
            let text = String::from_utf8(raw).unwrap();
            let id: u64 = text["{\"id\":".len()..]
                .split(',')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let depth = match n {
                1 => 125,
                2 => MAX_FRAME_DEPTH - 1,
                3 => MAX_FRAME_DEPTH - 1,
                _ => MAX_FRAME_DEPTH,
            };
            p.send_raw(&format!(r#"{{"id":{id},"ok":{}}}"#, nested(depth)))
                .await;
        }
    });
    let out = run(host(subject), cfg(), |mut j| async move {
        j.hello().await;
        j.start(T).await;
        for (id, depth) in [(1u64, 126usize), (2, 129), (3, MAX_FRAME_DEPTH)] {
            // {"op":"call","id":N,"req":{"op":"put","value":V}}: V is 2 below the frame.
            let frame = format!(
                r#"{{"op":"call","id":{id},"req":{{"op":"put","value":{}}}}}"#,
                nested(depth - 2)
            );
            j.send_raw(&frame).await;
            let raw = read_raw(&mut j.r, MAX_TO_JUDGE).await.unwrap();
            assert!(raw.starts_with(format!("{{\"id\":{id},\"ok\":[").as_bytes()));
        }
        let reply = j.call(4, json!({"op": "dir", "obj": {"$ref": 1}})).await;
        assert_eq!(
            reply,
            json!({"id": 4, "fault": "protocol", "generation": 2})
        );
        j.result(T, "failed").await;
    })
    .await;
    assert_eq!(out.infra_error, None);
    assert_eq!(out.results.kill_of(T), Some(Kill::Crashed));
}

/// Processes standing in for rank sandboxes (their `/proc` entries are what the meters
/// read), killed and reaped on drop.
struct Sandboxes(Mutex<Vec<std::process::Child>>);

impl Sandboxes {
    fn start(n: usize) -> Arc<Sandboxes> {
        let children = (0..n)
            .map(|_| {
                std::process::Command::new("sleep")
                    .arg("60")
                    .spawn()
                    .unwrap()
            })
            .collect();
        Arc::new(Sandboxes(Mutex::new(children)))
    }

    fn pids(&self) -> Vec<u32> {
        self.0.lock().unwrap().iter().map(|c| c.id()).collect()
    }

    fn end(&self, rank: usize) {
        let mut children = self.0.lock().unwrap();
        let _ = children[rank].kill();
        let _ = children[rank].wait();
    }
}

impl Drop for Sandboxes {
    fn drop(&mut self) {
        for c in self.0.get_mut().unwrap().iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test]
async fn a_rank_gone_after_its_last_collective_is_its_crash_not_infra() {
    let sandboxes = Sandboxes::start(2);
    let gone = Arc::new(tokio::sync::Notify::new());
    let ranks = {
        let (sandboxes, gone) = (sandboxes.clone(), gone.clone());
        script(move |rank, mut p| {
            let (sandboxes, gone) = (sandboxes.clone(), gone.clone());
            async move {
                while let Some((id, _)) = p.request().await {
                    p.send(json!({"id": id, "ok": rank})).await;
                    if rank == 1 {
                        // Its last collective done, rank 1 exits.
                        sandboxes.end(1);
                        gone.notify_one();
                        return;
                    }
                }
            }
        })
    };
    let mut host = host(plain());
    host.ranks = ranks;
    let pids = sandboxes.pids();
    host.rank_meters = Arc::new(move || pids.iter().map(|p| Meter::new(None, Some(*p))).collect());
    let cfg = BrokerConfig {
        budgets: vec![(
            T.to_owned(),
            Budget {
                rank_bytes: Some(1 << 50),
                collective_bytes: Some(1 << 50),
                ..Default::default()
            },
        )],
        ..cfg()
    };
    let out = run(host, cfg, move |mut j| async move {
        j.hello().await;
        j.start(T).await;
        j.send(json!({"op": "ranks", "id": 1, "world_size": 2}))
            .await;
        assert_eq!(
            j.read().await.unwrap(),
            json!({"id": 1, "group": 1, "world_size": 2})
        );
        j.send(json!({"op": "call_ranks", "id": 2, "reqs": [{"op": "dir"}, {"op": "dir"}]}))
            .await;
        let reply = j.read().await.unwrap();
        assert_eq!(
            (&reply["ranks"][0]["ok"], &reply["ranks"][1]["ok"]),
            (&json!(0), &json!(1))
        );
        gone.notified().await;
        j.result(T, "passed").await;
    })
    .await;
    assert_eq!(
        out.infra_error, None,
        "a vanished rank is measured as last read"
    );
    assert_eq!(out.results.kill_of(T), Some(Kill::Crashed));
}

#[tokio::test]
async fn replies_that_together_exceed_the_judges_frame_give_way_largest_first() {
    const BIG: usize = 40 << 20;
    let ranks = script(|rank, mut p| async move {
        while let Some((id, _)) = p.request().await {
            let size = if rank == 0 { BIG } else { BIG - 1 };
            let frame = format!(r#"{{"id":{id},"ok":"{}"}}"#, "x".repeat(size));
            p.send_raw(&frame).await;
        }
    });
    let mut host = host(plain());
    host.ranks = ranks;
    run(host, cfg(), |mut j| async move {
        j.hello().await;
        j.send(json!({"op": "ranks", "id": 1, "world_size": 2}))
            .await;
        j.read().await.unwrap();
        j.send(json!({"op": "call_ranks", "id": 2, "reqs": [{"op": "dir"}, {"op": "dir"}]}))
            .await;
        // Read as the judge does: at most its frame limit.
        let raw = read_raw(&mut j.r, MAX_TO_JUDGE)
            .await
            .expect("within the judge's limit");
        let reply: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(
            reply["ranks"][0]["err"],
            json!({"builtin": "infradev.NotEncodable", "classes": []})
        );
        assert_eq!(
            reply["ranks"][1]["ok"].as_str().map(str::len),
            Some(BIG - 1)
        );
        assert_eq!(keys(&reply["ranks"][0]), ["err", "subject_ns"]);
    })
    .await;
}

#[tokio::test]
async fn a_rank_never_has_a_callback_to_make() {
    let ranks = script(|_, mut p| async move {
        while let Some((id, _)) = p.request().await {
            p.send(json!({"id": id, "callback": {"cb": 1, "args": [], "kwargs": {"$dict": []}}}))
                .await;
        }
    });
    let mut host = host(plain());
    host.ranks = ranks;
    let out = run(host, cfg(), |mut j| async move {
        j.hello().await;
        j.start(T).await;
        j.send(json!({"op": "ranks", "id": 1, "world_size": 2}))
            .await;
        j.read().await.unwrap();
        j.send(json!({"op": "call", "id": 2, "rank": 1, "req": {"op": "dir"}}))
            .await;
        assert_eq!(
            j.read().await.unwrap(),
            json!({"id": 2, "group": 1, "fault": "protocol", "rank": 1})
        );
        j.result(T, "failed").await;
    })
    .await;
    assert_eq!(out.infra_error, None);
    assert_eq!(out.results.kill_of(T), Some(Kill::Crashed));
}
