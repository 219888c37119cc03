//! Measurements of the subject taken from outside it: memory from its cgroup (v1 or v2) or,
//! for a bare process, from procfs; traffic as bytes sent on its network namespace. Nothing
//! here is read from a file the subject can write: cgroup and procfs files are the kernel's.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const MIB: f64 = 1024.0 * 1024.0;

/// Where the subject's memory is read.
#[derive(Debug)]
pub enum MemorySource {
    /// cgroup v2: `memory.peak` (reset per open file by a write, kernel ≥ 6.12) and
    /// `memory.current`.
    CgroupV2 { dir: PathBuf, peak: Option<File> },
    /// cgroup v1: `memory.max_usage_in_bytes` (reset by writing 0, as root) and
    /// `memory.usage_in_bytes`.
    CgroupV1 { dir: PathBuf },
    /// A bare process: `VmHWM` of `/proc/<pid>/status`, reset through `clear_refs`.
    Process { pid: u32 },
}

/// The subject's meter: memory and traffic, either of which may be unavailable.
#[derive(Debug, Default)]
pub struct Meter {
    memory: Option<MemorySource>,
    /// `/proc/<pid>/net/dev` of a process in the subject's network namespace.
    net_dev: Option<PathBuf>,
    /// That process (the sandbox's first): while it lives, the sandbox does.
    pid: Option<u32>,
    /// Whether that process was ever seen alive (a pid this host cannot see never vanishes).
    seen: bool,
}

/// Readings at the start of a scenario.
#[derive(Debug, Clone, Copy, Default)]
pub struct Baseline {
    memory_bytes: Option<u64>,
    /// Whether the kernel's peak counter was reset at the start (else only samples count).
    peak_reset: bool,
    sent_bytes: Option<u64>,
    /// The highest memory reading seen since the start.
    sampled_peak: Option<u64>,
    /// The last traffic reading (after the last call): what a sandbox that has gone since
    /// had sent.
    last_sent: Option<u64>,
}

/// What a scenario used, as far as the meter could tell.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Usage {
    /// Peak memory above the scenario's start, MiB.
    pub peak_memory_mb: Option<f64>,
    /// Bytes sent on the subject's network namespace during the scenario.
    pub sent_bytes: Option<u64>,
}

impl Meter {
    pub fn new(memory: Option<MemorySource>, net_pid: Option<u32>) -> Meter {
        Meter {
            memory,
            net_dev: net_pid.map(|p| PathBuf::from(format!("/proc/{p}/net/dev"))),
            pid: net_pid,
            seen: false,
        }
    }

    /// A meter for a process running directly on this host (the local executor).
    pub fn for_process(pid: u32) -> Meter {
        Meter::new(Some(MemorySource::Process { pid }), Some(pid))
    }

    /// A meter for the container whose init process is `pid`: its memory cgroup as procfs
    /// names it, under the host's cgroup mount.
    pub fn for_container(pid: u32) -> Meter {
        Meter::new(cgroup_of(pid), Some(pid))
    }

    pub fn measures_memory(&self) -> bool {
        self.memory.is_some()
    }

    pub fn measures_traffic(&self) -> bool {
        self.net_dev.is_some()
    }

    /// Whether the measured sandbox is gone (its process, seen alive before, has exited):
    /// its figures are its last readings, and its end is its own doing. False where no
    /// process is known or it was never seen.
    pub fn vanished(&self) -> bool {
        self.seen && !self.alive()
    }

    fn alive(&self) -> bool {
        self.pid
            .is_some_and(|p| Path::new(&format!("/proc/{p}")).exists())
    }

    fn look(&mut self) {
        self.seen |= self.alive();
    }

    /// Starts a scenario: resets the peak where the kernel allows it, reads the baselines.
    pub fn begin(&mut self) -> Baseline {
        self.look();
        let peak_reset = self.reset_peak();
        let memory_bytes = self.current_memory();
        let sent_bytes = self.sent_bytes();
        Baseline {
            memory_bytes,
            peak_reset,
            sent_bytes,
            sampled_peak: memory_bytes,
            last_sent: sent_bytes,
        }
    }

    /// Records the current memory and traffic after a call (catches peaks where no reset is
    /// possible; keeps what a sandbox that exits before the end had sent).
    pub fn sample(&mut self, baseline: &mut Baseline) {
        self.look();
        if let Some(now) = self.current_memory() {
            baseline.sampled_peak = Some(baseline.sampled_peak.map_or(now, |p| p.max(now)));
        }
        if let Some(sent) = self.sent_bytes() {
            baseline.last_sent = Some(sent);
        }
    }

    /// Ends a scenario.
    pub fn end(&mut self, baseline: &Baseline) -> Usage {
        let mut baseline = *baseline;
        self.sample(&mut baseline);
        let kernel_peak = if baseline.peak_reset {
            self.peak_memory()
        } else {
            None
        };
        let peak = match (kernel_peak, baseline.sampled_peak) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let peak_memory_mb = match (peak, baseline.memory_bytes) {
            (Some(p), Some(start)) => Some(p.saturating_sub(start) as f64 / MIB),
            _ => None,
        };
        // A live sandbox is read now; one that is gone counts as last read. A live one that
        // cannot be read has no figure (never a made-up one).
        let now = self
            .sent_bytes()
            .or_else(|| self.vanished().then_some(baseline.last_sent).flatten());
        let sent_bytes = match (now, baseline.sent_bytes) {
            (Some(now), Some(start)) => Some(now.saturating_sub(start)),
            _ => None,
        };
        Usage {
            peak_memory_mb,
            sent_bytes,
        }
    }

    fn reset_peak(&mut self) -> bool {
        match &mut self.memory {
            Some(MemorySource::CgroupV2 { dir, peak }) => {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(dir.join("memory.peak"));
                match file {
                    Ok(f) if (&f).write_all(b"reset\n").is_ok() => {
                        *peak = Some(f);
                        true
                    }
                    _ => {
                        *peak = None;
                        false
                    }
                }
            }
            Some(MemorySource::CgroupV1 { dir }) => {
                std::fs::write(dir.join("memory.max_usage_in_bytes"), b"0").is_ok()
            }
            Some(MemorySource::Process { pid }) => {
                std::fs::write(format!("/proc/{pid}/clear_refs"), b"5").is_ok()
            }
            None => false,
        }
    }

    fn peak_memory(&mut self) -> Option<u64> {
        match &mut self.memory {
            Some(MemorySource::CgroupV2 { peak: Some(f), .. }) => {
                let mut s = String::new();
                f.seek(SeekFrom::Start(0)).ok()?;
                f.read_to_string(&mut s).ok()?;
                s.trim().parse().ok()
            }
            Some(MemorySource::CgroupV2 { .. }) => None,
            Some(MemorySource::CgroupV1 { dir }) => {
                read_u64(&dir.join("memory.max_usage_in_bytes"))
            }
            Some(MemorySource::Process { pid }) => status_kib(*pid, "VmHWM:").map(|k| k * 1024),
            None => None,
        }
    }

    fn current_memory(&self) -> Option<u64> {
        match &self.memory {
            Some(MemorySource::CgroupV2 { dir, .. }) => read_u64(&dir.join("memory.current")),
            Some(MemorySource::CgroupV1 { dir }) => read_u64(&dir.join("memory.usage_in_bytes")),
            Some(MemorySource::Process { pid }) => status_kib(*pid, "VmRSS:").map(|k| k * 1024),
            None => None,
        }
    }

    fn sent_bytes(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.net_dev.as_ref()?).ok()?;
        parse_net_dev_sent(&text)
    }
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The memory cgroup of process `pid`, from `/proc/<pid>/cgroup`, under `/sys/fs/cgroup`.
fn cgroup_of(pid: u32) -> Option<MemorySource> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    cgroup_dir(&text, Path::new("/sys/fs/cgroup")).map(|(dir, v2)| {
        if v2 {
            MemorySource::CgroupV2 { dir, peak: None }
        } else {
            MemorySource::CgroupV1 { dir }
        }
    })
}

/// Where a process's memory cgroup lives, given its `/proc/<pid>/cgroup` and the cgroup
/// mount: the v1 `memory` controller's directory when there is one, else the v2 one.
/// Pure, for the table test.
fn cgroup_dir(proc_cgroup: &str, mount: &Path) -> Option<(PathBuf, bool)> {
    let rel = |p: &str| mount.join(p.trim_start_matches('/'));
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == "memory") {
            return Some((
                rel(&format!("memory/{}", path.trim_start_matches('/'))),
                false,
            ));
        }
    }
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|path| (rel(path), true))
}

/// Bytes transmitted on every interface of a `/proc/<pid>/net/dev` listing.
fn parse_net_dev_sent(text: &str) -> Option<u64> {
    let mut total = 0u64;
    let mut seen = false;
    for line in text.lines().skip(2) {
        let (_, counters) = line.split_once(':')?;
        // Receive: bytes packets errs drop fifo frame compressed multicast; then transmit.
        let tx = counters.split_whitespace().nth(8)?.parse::<u64>().ok()?;
        total = total.saturating_add(tx);
        seen = true;
    }
    seen.then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_cgroups_are_found_for_v1_and_v2() {
        let v1 = "9:name=systemd:/docker/abc\n4:memory:/docker/abc\n1:cpu:/docker/abc\n0::/\n";
        assert_eq!(
            cgroup_dir(v1, Path::new("/sys/fs/cgroup")),
            Some((PathBuf::from("/sys/fs/cgroup/memory/docker/abc"), false))
        );
        let v2 = "0::/system.slice/docker-abc.scope\n";
        assert_eq!(
            cgroup_dir(v2, Path::new("/sys/fs/cgroup")),
            Some((
                PathBuf::from("/sys/fs/cgroup/system.slice/docker-abc.scope"),
                true
            ))
        );
        assert_eq!(cgroup_dir("", Path::new("/sys/fs/cgroup")), None);
    }

    #[test]
    fn sent_bytes_add_up_over_interfaces() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n  \
eth0:     50       1    0    0    0     0          0         0      70       1    0    0    0     0       0          0\n";
        assert_eq!(parse_net_dev_sent(text), Some(1070));
        assert_eq!(parse_net_dev_sent("header\nheader\n"), None);
    }

    #[test]
    fn a_sandbox_gone_after_its_last_call_counts_as_last_read() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut meter = Meter::new(None, Some(child.id()));
        let mut base = meter.begin();
        assert!(base.sent_bytes.is_some() && !meter.vanished());
        // The last call's reading, then the sandbox exits before the test ends.
        meter.sample(&mut base);
        let last = base.last_sent.unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(meter.vanished());
        let usage = meter.end(&base);
        assert_eq!(
            usage.sent_bytes,
            Some(last - base.sent_bytes.unwrap()),
            "the bytes sent up to its last call, not no figure"
        );

        // A live process whose counters cannot be read: no figure, and it has not vanished.
        let mut meter = Meter::new(None, Some(std::process::id()));
        let base = meter.begin();
        meter.net_dev = Some(PathBuf::from("/nonexistent/net/dev"));
        assert!(!meter.vanished());
        assert_eq!(meter.end(&base).sent_bytes, None);
        assert!(!Meter::default().vanished());
        // A process this host never saw (another pid namespace) has not vanished.
        let mut unseen = Meter::new(None, Some(u32::MAX - 1));
        unseen.begin();
        assert!(!unseen.vanished());
    }

    #[test]
    fn this_process_can_be_measured() {
        let mut meter = Meter::for_process(std::process::id());
        let base = meter.begin();
        let block = vec![1u8; 64 << 20];
        std::hint::black_box(&block);
        let usage = meter.end(&base);
        drop(block);
        let peak = usage.peak_memory_mb.expect("procfs memory is readable");
        assert!(peak >= 32.0, "64 MiB touched, {peak} MiB measured");
        assert!(usage.sent_bytes.is_some());
    }
}
