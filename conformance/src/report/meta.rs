//! What the report pages say about the run itself: command line, seed, date, commit, host.

/// How the run was started, shown at the top of the HTML page and the Markdown summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunMeta {
    /// The command line, arguments separated by spaces.
    pub command: String,
    /// `--seed` and `--deterministic`, in words.
    pub seed: String,
    /// When the run started, UTC, `YYYY-MM-DD HH:MM:SS UTC`.
    pub date: String,
    /// The source commit (`GITHUB_SHA`, else `git rev-parse HEAD`), or `unknown`.
    pub commit: String,
    /// Host name (`/etc/hostname` or `$HOSTNAME`), or `unknown`.
    pub host: String,
    /// The allocator settings the runs used and where they came from (the runner's
    /// `allocator_line`: `expandable_segments:True from MEMREUSE_ALLOC_CONF`, per backend
    /// when they differ); [`RunMeta::capture`] starts it at `defaults`.
    pub allocator: String,
}

impl RunMeta {
    /// Captures the environment of this process; `seed` is the runner's description of
    /// `--seed`/`--deterministic`. The allocator line is `defaults` until the caller sets
    /// what its runs used.
    pub fn capture(seed: String) -> RunMeta {
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        let commit = std::env::var("GITHUB_SHA")
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| {
                let out = std::process::Command::new("git")
                    .args(["rev-parse", "--short=12", "HEAD"])
                    .stderr(std::process::Stdio::null())
                    .output()
                    .ok()?;
                out.status
                    .success()
                    .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let host = std::fs::read_to_string("/etc/hostname")
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "unknown".to_owned());
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        RunMeta {
            command,
            seed,
            date: utc_date(secs),
            commit,
            host,
            // The environment alone cannot say what the runs used (`--alloc-conf` wins,
            // and each backend reads its own variables): the runner fills this in.
            allocator: "defaults".to_owned(),
        }
    }

    /// `(label, value)` pairs in display order.
    pub fn fields(&self) -> [(&'static str, &str); 6] {
        [
            ("command", &self.command),
            ("seed", &self.seed),
            ("date", &self.date),
            ("commit", &self.commit),
            ("host", &self.host),
            ("allocator", &self.allocator),
        ]
    }
}

/// Seconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC` (civil-from-days, proleptic
/// Gregorian calendar).
fn utc_date(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::utc_date;

    #[test]
    fn utc_dates_of_known_instants() {
        assert_eq!(utc_date(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_date(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_date(1_796_120_288), "2026-12-01 10:18:08 UTC");
    }
}
