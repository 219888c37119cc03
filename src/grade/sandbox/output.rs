//! Bounded capture of a sandbox's output: hostile code can print without end.

/// Keeps the last `cap` bytes written, and counts what was dropped.
#[derive(Debug)]
pub struct CappedOutput {
    cap: usize,
    buf: std::collections::VecDeque<u8>,
    dropped: u64,
}

impl CappedOutput {
    pub fn new(cap: usize) -> Self {
        CappedOutput {
            cap,
            buf: std::collections::VecDeque::with_capacity(cap.min(64 * 1024)),
            dropped: 0,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        let bytes = if bytes.len() > self.cap {
            self.dropped += (bytes.len() - self.cap) as u64;
            &bytes[bytes.len() - self.cap..]
        } else {
            bytes
        };
        let overflow = (self.buf.len() + bytes.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.dropped += overflow as u64;
        self.buf.extend(bytes);
    }

    pub fn into_string(self) -> String {
        let text = String::from_utf8_lossy(&Vec::from(self.buf)).into_owned();
        if self.dropped > 0 {
            format!("[{} earlier bytes dropped]\n{text}", self.dropped)
        } else {
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_tail() {
        let mut out = CappedOutput::new(4);
        out.push(b"abc");
        out.push(b"def");
        assert_eq!(out.into_string(), "[2 earlier bytes dropped]\ncdef");
        let mut out = CappedOutput::new(4);
        out.push(b"0123456789");
        assert_eq!(out.into_string(), "[6 earlier bytes dropped]\n6789");
    }
}
