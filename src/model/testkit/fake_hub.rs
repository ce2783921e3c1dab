//! A stand-in for the Hugging Face hub on 127.0.0.1, so the download path (progress, cancel,
//! resume, errors) is tested without a network.
//!
//! It answers `GET /{owner}/{name}/resolve/{revision}/{file}` the way the hub does for a
//! small file: `x-repo-commit`, `etag`, and `Range` requests with `206` and `content-range`;
//! `404` for files it does not hold; `401` without the token when one is required. It can send
//! slowly (a pause per chunk), so a test can cancel mid-download, and it records each request's
//! path and range. HTTP/1.1, one thread per connection, `Connection: close`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// One file the fake hub serves.
#[derive(Debug, Clone)]
struct Served {
    bytes: Arc<Vec<u8>>,
    commit: String,
    etag: String,
}

/// A request the fake hub received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenRequest {
    pub path: String,
    /// The `Range` header, if any.
    pub range: Option<String>,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
}

#[derive(Debug, Default)]
struct Shared {
    /// `(repo, revision, file)` → the file.
    files: HashMap<(String, String, String), Served>,
    seen: Vec<SeenRequest>,
    /// Bytes per chunk and the pause after each.
    throttle: Option<(usize, Duration)>,
    token: Option<String>,
}

/// The fake hub; stops when dropped.
#[derive(Debug)]
pub struct FakeHub {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FakeHub {
    /// Listens on a free port of 127.0.0.1.
    pub fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (shared.clone(), stop.clone());
        std::thread::Builder::new().name("fake-hub".into()).spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                let _ = std::thread::Builder::new()
                    .name("fake-hub-conn".into())
                    .spawn(move || serve(conn, &s));
            }
        })?;
        Ok(Self { addr, shared, stop })
    }

    /// The address to use as the hub endpoint (`http://127.0.0.1:PORT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Serves `bytes` as `file` of `repo` at `revision`, in commit `commit` (40 hex digits).
    pub fn add(&self, repo: &str, revision: &str, commit: &str, file: &str, bytes: Vec<u8>) {
        let etag = format!("{:016x}{:016x}", xxhash_rust::xxh3::xxh3_64(&bytes), bytes.len());
        let served = Served {
            bytes: Arc::new(bytes),
            commit: commit.to_owned(),
            etag,
        };
        lock(&self.shared)
            .files
            .insert((repo.to_owned(), revision.to_owned(), file.to_owned()), served);
    }

    /// Sends `chunk` bytes at a time with `pause` after each (`None`: as fast as it can).
    pub fn throttle(&self, throttle: Option<(usize, Duration)>) {
        lock(&self.shared).throttle = throttle;
    }

    /// Answers 401 unless the request carries `Authorization: Bearer <token>`.
    pub fn require_token(&self, token: Option<&str>) {
        lock(&self.shared).token = token.map(str::to_owned);
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<SeenRequest> {
        lock(&self.shared).seen.clone()
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// `bytes=a-b` / `bytes=a-` → `(a, b)` within `len` (b inclusive).
fn parse_range(range: &str, len: usize) -> Option<(usize, usize)> {
    let spec = range.strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    let a: usize = a.trim().parse().ok()?;
    let b: usize = match b.trim() {
        "" => len.checked_sub(1)?,
        b => b.parse::<usize>().ok()?.min(len.checked_sub(1)?),
    };
    (a <= b && a < len).then_some((a, b))
}

fn serve(conn: TcpStream, shared: &Mutex<Shared>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(read_half) = conn.try_clone() else { return };
    let mut reader = BufReader::new(read_half);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        match reader.read_line(&mut h) {
            Ok(0) | Err(_) => break,
            Ok(_) if h.trim().is_empty() => break,
            Ok(_) => {
                if let Some((k, v)) = h.split_once(':') {
                    headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
                }
            }
        }
    }
    let seen = SeenRequest {
        path: path.clone(),
        range: headers.get("range").cloned(),
        authorization: headers.get("authorization").cloned(),
    };
    let (served, throttle, token) = {
        let mut s = lock(shared);
        s.seen.push(seen.clone());
        let served = lookup(&s.files, &path);
        (served, s.throttle, s.token.clone())
    };
    let mut out = conn;
    if let Some(t) = token {
        if seen.authorization.as_deref() != Some(&format!("Bearer {t}")) {
            let _ = write!(
                out,
                "HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            return;
        }
    }
    let Some(f) = served else {
        let _ = write!(
            out,
            "HTTP/1.1 404 Not Found\r\nx-error-code: EntryNotFound\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        return;
    };
    let len = f.bytes.len();
    let (status, start, end) = match seen.range.as_deref().map(|r| parse_range(r, len)) {
        None => ("200 OK", 0, len),
        Some(Some((a, b))) => ("206 Partial Content", a, b + 1),
        Some(None) => {
            let _ = write!(
                out,
                "HTTP/1.1 416 Range Not Satisfiable\r\ncontent-range: bytes */{len}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            return;
        }
    };
    let mut head = format!(
        "HTTP/1.1 {status}\r\nx-repo-commit: {}\r\netag: \"{}\"\r\ncontent-length: {}\r\nconnection: close\r\n",
        f.commit,
        f.etag,
        end - start
    );
    if status.starts_with("206") {
        head.push_str(&format!("content-range: bytes {start}-{}/{len}\r\n", end - 1));
    }
    head.push_str("\r\n");
    if out.write_all(head.as_bytes()).is_err() {
        return;
    }
    let body = &f.bytes[start..end];
    match throttle {
        None => {
            let _ = out.write_all(body);
        }
        Some((chunk, pause)) => {
            for c in body.chunks(chunk.max(1)) {
                if out.write_all(c).and_then(|_| out.flush()).is_err() {
                    return; // the client went away (a cancelled download)
                }
                std::thread::sleep(pause);
            }
        }
    }
}

/// The file `/{owner}/{name}/resolve/{revision}/{file}` names (the revision URL-encoded).
fn lookup(files: &HashMap<(String, String, String), Served>, path: &str) -> Option<Served> {
    let mut parts = path.trim_start_matches('/').splitn(5, '/');
    let (owner, name, resolve, revision, file) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if resolve != "resolve" {
        return None;
    }
    let revision = revision.replace("%2F", "/");
    files
        .get(&(format!("{owner}/{name}"), revision, file.to_owned()))
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-0", 10), Some((0, 0)));
        assert_eq!(parse_range("bytes=4-", 10), Some((4, 9)));
        assert_eq!(parse_range("bytes=4-100", 10), Some((4, 9)));
        assert_eq!(parse_range("bytes=10-", 10), None);
        assert_eq!(parse_range("lines=1-2", 10), None);
    }
}
