//! A minimal HTTP/1.1 client over a plain TCP stream, enough for `/readyz`,
//! `/healthz`, `/metrics` and the failpoints without an HTTP client crate.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The status code of an HTTP status line (`HTTP/1.1 200 OK`).
pub fn parse_status(response: &[u8]) -> Option<u16> {
    let line_end = response
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(response.len());
    let line = std::str::from_utf8(&response[..line_end]).ok()?;
    let mut parts = line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?;
    if code.len() != 3 {
        return None;
    }
    code.parse().ok()
}

/// The body of a response (after the blank line).
pub fn body(response: &[u8]) -> &[u8] {
    match response.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => &response[i + 4..],
        None => &[],
    }
}

/// `GET path` on `addr`: the status and the whole response.
pub async fn get(addr: &str, path: &str, timeout: Duration) -> std::io::Result<(u16, Vec<u8>)> {
    request(addr, "GET", path, timeout).await
}

/// `method path` with no body; the status code and the whole response.
pub async fn request(
    addr: &str,
    method: &str,
    path: &str,
    timeout: Duration,
) -> std::io::Result<(u16, Vec<u8>)> {
    request_with(addr, method, path, &[], "", timeout).await
}

/// `GET path` with extra `headers`.
pub async fn get_with(
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> std::io::Result<(u16, Vec<u8>)> {
    request_with(addr, "GET", path, headers, "", timeout).await
}

/// `POST path` with a JSON body and extra `headers`.
pub async fn post_json(
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    timeout: Duration,
) -> std::io::Result<(u16, Vec<u8>)> {
    request_with(addr, "POST", path, headers, body, timeout).await
}

/// `method path` with extra `headers` and `body`; the status code and the
/// whole response.
pub async fn request_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    timeout: Duration,
) -> std::io::Result<(u16, Vec<u8>)> {
    let fut = async {
        let mut stream = TcpStream::connect(addr).await?;
        let extra: String = headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}\r\n"))
            .collect();
        // `addr` is the Host unless `headers` name another.
        let host = match headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            true => String::new(),
            false => format!("Host: {addr}\r\n"),
        };
        let request = format!(
            "{method} {path} HTTP/1.1\r\n{host}Content-Length: {}\r\n{extra}\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut buf = Vec::new();
        stream.read_to_end(&mut buf).await?;
        let code = parse_status(&buf).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not an HTTP response: {:?}", String::from_utf8_lossy(&buf)),
            )
        })?;
        Ok((code, buf))
    };
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// The status of `GET path`, or the reason there is none.
pub async fn status(addr: &str, path: &str) -> Result<u16, String> {
    get(addr, path, Duration::from_secs(2))
        .await
        .map(|(code, _)| code)
        .map_err(|e| e.to_string())
}

/// Polls `GET path` until it answers 200. On timeout, the last outcome.
pub async fn wait_200(addr: &str, path: &str, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match status(addr, path).await {
            Ok(200) => return Ok(()),
            Ok(code) => format!("status {code}"),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "GET http://{addr}{path} not 200 after {timeout:?}: {last}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
