//! Length-prefixed JSON frames on a Unix socket: a 4-byte big-endian length, then that many
//! bytes of UTF-8 JSON (docs/probe-protocol.md). Every read is bounded: a peer that announces
//! more than the cap, or sends something that is not one JSON object, ends the connection.

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Why a frame could not be read.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("the peer closed the connection")]
    Closed,
    #[error("a frame of {0} bytes is over the {1}-byte limit")]
    TooLarge(usize, usize),
    #[error("a frame is not one JSON object")]
    NotJson,
    #[error("i/o error on the socket: {0}")]
    Io(String),
}

/// Reads one frame of at most `cap` bytes and parses it as a JSON object.
pub async fn read_frame<R: AsyncReadExt + Unpin>(
    reader: &mut R,
    cap: usize,
) -> Result<Value, FrameError> {
    let bytes = read_raw(reader, cap).await?;
    parse_object(&bytes)
}

/// Reads one frame's bytes (at most `cap`) without parsing them.
pub async fn read_raw<R: AsyncReadExt + Unpin>(
    reader: &mut R,
    cap: usize,
) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    if let Err(e) = reader.read_exact(&mut len).await {
        return Err(read_error(e));
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > cap {
        return Err(FrameError::TooLarge(len, cap));
    }
    let mut buf = vec![0u8; len];
    reader.read_exact(&mut buf).await.map_err(read_error)?;
    Ok(buf)
}

/// A peer that went away is a closed connection, whether it closed cleanly (end of file) or
/// with frames of ours still unread in its socket (`ECONNRESET`: a sandbox killed at its
/// deadline while the broker's answer waited for it). Only other failures are socket errors.
fn read_error(e: std::io::Error) -> FrameError {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionReset, UnexpectedEof};
    match e.kind() {
        UnexpectedEof | ConnectionReset | ConnectionAborted => FrameError::Closed,
        _ => FrameError::Io(e.to_string()),
    }
}

/// A frame's bytes as a JSON object.
pub fn parse_object(bytes: &[u8]) -> Result<Value, FrameError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ => Err(FrameError::NotJson),
    }
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWriteExt + Unpin>(
    writer: &mut W,
    value: &Value,
) -> Result<(), FrameError> {
    let body = serde_json::to_vec(value).map_err(|e| FrameError::Io(e.to_string()))?;
    write_raw(writer, &body).await
}

/// Writes one frame of already-encoded bytes.
pub async fn write_raw<W: AsyncWriteExt + Unpin>(
    writer: &mut W,
    body: &[u8],
) -> Result<(), FrameError> {
    write_parts(writer, &[body]).await
}

/// Writes one frame whose body is `parts`, one after the other (a composed frame: the
/// broker's envelope around payloads it does not copy).
pub async fn write_parts<W: AsyncWriteExt + Unpin>(
    writer: &mut W,
    parts: &[&[u8]],
) -> Result<(), FrameError> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let len = u32::try_from(total).map_err(|_| FrameError::TooLarge(total, u32::MAX as usize))?;
    let io = |e: std::io::Error| FrameError::Io(e.to_string());
    writer.write_all(&len.to_be_bytes()).await.map_err(io)?;
    for part in parts {
        writer.write_all(part).await.map_err(io)?;
    }
    writer.flush().await.map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_caps_hold() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_frame(&mut a, &serde_json::json!({"op": "hello", "n": 1}))
            .await
            .unwrap();
        assert_eq!(read_frame(&mut b, 1024).await.unwrap()["op"], "hello");

        write_frame(&mut a, &serde_json::json!({"big": "x".repeat(2000)}))
            .await
            .unwrap();
        assert!(matches!(
            read_frame(&mut b, 1024).await,
            Err(FrameError::TooLarge(_, 1024))
        ));

        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_raw(&mut a, b"[1, 2]").await.unwrap();
        assert_eq!(read_frame(&mut b, 1024).await, Err(FrameError::NotJson));
        write_raw(&mut a, b"{\"a\": NaN}").await.unwrap();
        assert_eq!(read_frame(&mut b, 1024).await, Err(FrameError::NotJson));
        drop(a);
        assert_eq!(read_frame(&mut b, 1024).await, Err(FrameError::Closed));
    }

    #[tokio::test]
    async fn a_peer_gone_with_our_frame_unread_is_a_closed_connection() {
        // The kernel resets a Unix stream whose peer closes with data still queued for it.
        let (mut broker, sandbox) = tokio::net::UnixStream::pair().unwrap();
        write_frame(&mut broker, &serde_json::json!({"id": 1, "ok": null}))
            .await
            .unwrap();
        drop(sandbox);
        assert_eq!(read_frame(&mut broker, 1024).await, Err(FrameError::Closed));
    }

    #[tokio::test]
    async fn a_torn_frame_is_a_closed_connection() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        a.write_all(&100u32.to_be_bytes()).await.unwrap();
        a.write_all(b"{\"half\":").await.unwrap();
        drop(a);
        assert_eq!(read_frame(&mut b, 1024).await, Err(FrameError::Closed));
    }
}
