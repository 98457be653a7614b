//! Reporting conformance results: one line per case, a summary per backend, JSON.

use super::{CaseResult, Status};

/// Counts of each status: (ok, fail, unsupported, skipped).
pub fn summary(results: &[CaseResult]) -> (usize, usize, usize, usize) {
    let c = |s| results.iter().filter(|r| r.status == s).count();
    (
        c(Status::Ok),
        c(Status::Fail),
        c(Status::Unsupported),
        c(Status::Skipped),
    )
}

/// One line per case: status, id, time, work, detail.
pub fn case_line(backend: &str, r: &CaseResult) -> String {
    format!(
        "  {:<11} {backend:<5} {:<62} {:>9.2} ms {:>10} {:>10}  {}",
        r.status.to_string(),
        r.name,
        r.millis,
        human(r.flops, "F"),
        human(r.bytes, "B"),
        r.detail
    )
}

/// `1.2 GF`, `35 kB`...
pub fn human(x: f64, unit: &str) -> String {
    if x <= 0.0 || !x.is_finite() {
        return "-".into();
    }
    match [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(s, _)| x >= *s)
    {
        Some((s, p)) => format!("{:.1} {p}{unit}", x / s),
        None => format!("{x:.0} {unit}"),
    }
}

/// `{name}: {ok} passed, {fail} failed, {uns} unsupported, {skip} skipped ({secs} s)`.
pub fn summary_line(name: &str, results: &[CaseResult], secs: f64) -> String {
    let (ok, fail, uns, skip) = summary(results);
    format!("{name}: {ok} passed, {fail} failed, {uns} unsupported, {skip} skipped ({secs:.1} s)")
}

/// The ids that failed, with their details.
pub fn failures(backend: &str, results: &[CaseResult]) -> Vec<String> {
    results
        .iter()
        .filter(|r| r.status == Status::Fail)
        .map(|r| format!("{backend} {}: {}", r.name, r.detail))
        .collect()
}

/// The JSON of one backend's results (the fields `mxmoe check --json` has always written, plus
/// `flops` and `bytes` per case).
pub fn backend_json(name: &str, adapter: &str, results: &[CaseResult]) -> serde_json::Value {
    serde_json::json!({
        "backend": name,
        "adapter": adapter,
        "cases": results.iter().map(|r| serde_json::json!({
            "name": r.name,
            "status": r.status.to_string(),
            "detail": r.detail,
            "ms": r.millis,
            "flops": r.flops,
            "bytes": r.bytes,
        })).collect::<Vec<_>>(),
    })
}

/// The JSON of a backend that could not be opened.
pub fn unopened_json(name: &str, status: Status, reason: &str) -> serde_json::Value {
    serde_json::json!({"backend": name, "status": status.to_string(), "reason": reason})
}

/// Totals of a whole run: cases per status over the backends that ran, and the backends that
/// could not be opened (missing: skipped; failed: a failure).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Totals {
    pub cases: usize,
    pub passed: usize,
    pub failed: usize,
    pub unsupported: usize,
    pub skipped: usize,
    pub backends_run: usize,
    pub backends_missing: usize,
    pub backends_failed_to_open: usize,
}

impl Totals {
    pub fn of(reports: &[super::BackendReport]) -> Totals {
        let mut t = Totals::default();
        for r in reports {
            match &r.adapter {
                Ok(_) => {
                    let (ok, fail, uns, skip) = summary(&r.results);
                    t.backends_run += 1;
                    t.cases += r.results.len();
                    t.passed += ok;
                    t.failed += fail;
                    t.unsupported += uns;
                    t.skipped += skip;
                }
                Err(_) if r.open_failed => t.backends_failed_to_open += 1,
                Err(_) => t.backends_missing += 1,
            }
        }
        t
    }

    /// `totals: 812 cases, 800 passed, 0 failed, 12 unsupported, 0 skipped; 2 backend(s) run,
    /// 1 missing, 0 failed to open`.
    pub fn line(&self) -> String {
        format!(
            "totals: {} cases, {} passed, {} failed, {} unsupported, {} skipped; {} backend(s) run, {} missing, {} failed to open",
            self.cases,
            self.passed,
            self.failed,
            self.unsupported,
            self.skipped,
            self.backends_run,
            self.backends_missing,
            self.backends_failed_to_open
        )
    }
}

/// The JSON of a whole run (`mxmoe check --json`): the suite, the totals and one object per
/// backend ([`backend_json`] / [`unopened_json`]).
pub fn run_json(suite: &str, secs: f64, reports: &[super::BackendReport]) -> serde_json::Value {
    serde_json::json!({
        "suite": suite,
        "seconds": secs,
        "totals": Totals::of(reports),
        "backends": reports.iter().map(|r| r.json()).collect::<Vec<_>>(),
    })
}

/// Text escaped for an XML attribute or element.
fn xml(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            // XML 1.0 has no representation for most control characters.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => o.push('?'),
            c => o.push(c),
        }
    }
    o
}

/// JUnit XML of a whole run (`mxmoe check --junit`), the shape CI systems read (Jenkins,
/// GitLab, GitHub test reporters): one `<testsuite>` per backend, one `<testcase>` per case
/// (`classname` = backend, `name` = case id, `time` in seconds); FAIL is `<failure>`,
/// UNSUPPORTED and SKIPPED are `<skipped>` with the reason. A backend that could not be opened
/// is one testcase `open`, failed or skipped with the reason.
pub fn junit(suite: &str, reports: &[super::BackendReport]) -> String {
    let t = Totals::of(reports);
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    o += &format!(
        "<testsuites name=\"mxmoe check ({})\" tests=\"{}\" failures=\"{}\" skipped=\"{}\">\n",
        xml(suite),
        t.cases + t.backends_missing + t.backends_failed_to_open,
        t.failed + t.backends_failed_to_open,
        t.unsupported + t.skipped + t.backends_missing
    );
    for r in reports {
        let name = xml(&r.name);
        match &r.adapter {
            Ok(adapter) => {
                let (_, fail, uns, skip) = summary(&r.results);
                o += &format!(
                    "  <testsuite name=\"{name}\" tests=\"{}\" failures=\"{fail}\" skipped=\"{}\" time=\"{:.3}\">\n",
                    r.results.len(),
                    uns + skip,
                    r.secs
                );
                o += &format!(
                    "    <properties><property name=\"adapter\" value=\"{}\"/></properties>\n",
                    xml(adapter)
                );
                for c in &r.results {
                    o += &format!(
                        "    <testcase classname=\"{name}\" name=\"{}\" time=\"{:.6}\"",
                        xml(&c.name),
                        c.millis / 1e3
                    );
                    match c.status {
                        Status::Ok => o += "/>\n",
                        Status::Fail => {
                            o += &format!(
                                "><failure message=\"{}\"/></testcase>\n",
                                xml(&c.detail)
                            )
                        }
                        Status::Unsupported | Status::Skipped => {
                            o += &format!(
                                "><skipped message=\"{}: {}\"/></testcase>\n",
                                c.status,
                                xml(&c.detail)
                            )
                        }
                    }
                }
                o += "  </testsuite>\n";
            }
            Err(why) => {
                let (f, s) = if r.open_failed { (1, 0) } else { (0, 1) };
                o += &format!(
                    "  <testsuite name=\"{name}\" tests=\"1\" failures=\"{f}\" skipped=\"{s}\" time=\"0\">\n"
                );
                o += &format!("    <testcase classname=\"{name}\" name=\"open\" time=\"0\">");
                if r.open_failed {
                    o += &format!(
                        "<failure message=\"{} ({})\"/>",
                        xml(why),
                        xml(&r.fail_why)
                    );
                } else {
                    o += &format!("<skipped message=\"{}\"/>", xml(why));
                }
                o += "</testcase>\n  </testsuite>\n";
            }
        }
    }
    o += "</testsuites>\n";
    o
}
