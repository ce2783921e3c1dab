//! What transformers' Python environment gives chat templates, rebuilt for minijinja:
//! `{% generation %}` tags, `raise_exception`, `strftime_now` (Python's `strftime` codes), a
//! `tojson` filter that writes what Python's `json.dumps` writes, and Jinja2's `iterable` test.

use std::fmt;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error as JinjaError, ErrorKind, Value};

/// Deepest nesting `tojson` writes before giving up (values built from
/// messages are never this deep; the bound keeps a hostile template finite).
const TOJSON_MAX_DEPTH: usize = 256;

/// Rewrites `{% generation %}` / `{% endgeneration %}` (transformers'
/// `AssistantTracker` extension, which only marks a span) into
/// `{% if true %}` / `{% endif %}`, keeping their whitespace control.
pub(super) fn strip_generation_tags(source: &str) -> String {
    if !source.contains("generation") {
        return source.to_owned();
    }
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (open, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, close) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[body.len() - 1..]),
            None => (body, ""),
        };
        let replacement = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(r) => {
                out.push_str("{%");
                out.push_str(open);
                out.push(' ');
                out.push_str(r);
                out.push(' ');
                out.push_str(close);
                out.push_str("%}");
            }
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// The message a template passed to `raise_exception`, carried as an error source.
#[derive(Debug)]
struct RaisedByTemplate(String);

impl fmt::Display for RaisedByTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedByTemplate {}

/// The message of a `raise_exception(..)` call somewhere in `e`'s source chain.
pub(super) fn raised_message(e: &JinjaError) -> Option<&str> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(raised) = c.downcast_ref::<RaisedByTemplate>() {
            return Some(&raised.0);
        }
        cause = c.source();
    }
    None
}

/// `raise_exception(msg)`: aborts rendering with `msg` (transformers raises a
/// `TemplateError(msg)`).
pub(super) fn raise_exception(msg: String) -> Result<Value, JinjaError> {
    Err(
        JinjaError::new(ErrorKind::InvalidOperation, "the template called raise_exception")
            .with_source(RaisedByTemplate(msg)),
    )
}

/// `strftime_now(fmt)`: the current time formatted like Python's `strftime`
/// (in UTC; see the module docs).
pub(super) fn strftime_now(fmt: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    strftime(&fmt, secs)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Formats `unix_secs` (UTC) with the common `strftime` directives: `%Y %y %m
/// %d %e %j %H %I %M %S %p %B %b %h %A %a %u %w %F %T %D %%`, and glibc's `%-d`
/// style (no padding). Unknown directives are kept as written.
pub(super) fn strftime(fmt: &str, unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let secs_of_day = unix_secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (secs_of_day / 3600, secs_of_day % 3600 / 60, secs_of_day % 60);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday; 0 = Monday
    let day_of_year = days - days_from_civil(year, 1, 1) + 1;
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };
    let month_name = MONTHS[(month - 1) as usize];
    let weekday_name = WEEKDAYS[weekday];

    let mut out = String::with_capacity(fmt.len() + 16);
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = chars.next();
        let pad = if spec == Some('-') {
            spec = chars.next();
            false
        } else {
            true
        };
        let num = |n: i64, width: usize| if pad { format!("{n:0width$}") } else { n.to_string() };
        match spec {
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&num(year.rem_euclid(100), 2)),
            Some('m') => out.push_str(&num(month, 2)),
            Some('d') => out.push_str(&num(day, 2)),
            Some('e') => out.push_str(&if pad { format!("{day:2}") } else { day.to_string() }),
            Some('j') => out.push_str(&num(day_of_year, 3)),
            Some('H') => out.push_str(&num(hour, 2)),
            Some('I') => out.push_str(&num(hour12, 2)),
            Some('M') => out.push_str(&num(minute, 2)),
            Some('S') => out.push_str(&num(second, 2)),
            Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('B') => out.push_str(month_name),
            Some('b') | Some('h') => out.push_str(&month_name[..3]),
            Some('A') => out.push_str(weekday_name),
            Some('a') => out.push_str(&weekday_name[..3]),
            Some('u') => out.push_str(&(weekday + 1).to_string()),
            Some('w') => out.push_str(&((weekday + 1) % 7).to_string()),
            Some('F') => out.push_str(&format!("{year}-{month:02}-{day:02}")),
            Some('T') => out.push_str(&format!("{hour:02}:{minute:02}:{second:02}")),
            Some('D') => out.push_str(&format!("{month:02}/{day:02}/{:02}", year.rem_euclid(100))),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                if !pad {
                    out.push('-');
                }
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// `t` as RFC 3339 in UTC with nanoseconds (`2026-12-02T11:05:09.000000005Z`), as Go writes a
/// `time.Time` (Ollama's `created_at`); a time before 1970 is 1970's first instant.
pub fn rfc3339(t: std::time::SystemTime) -> String {
    let since = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(since.as_secs()).unwrap_or(i64::MAX);
    format!("{}.{:09}Z", strftime("%Y-%m-%dT%H:%M:%S", secs), since.subsec_nanos())
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
pub(super) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a civil date (inverse of [`civil_from_days`]).
pub(super) fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// How `tojson` lays out its output (Python `json.dumps` arguments).
struct JsonStyle {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

/// `tojson` as transformers defines it: `json.dumps(x, ensure_ascii=False,
/// indent=None, separators=None, sort_keys=False)`; all four are accepted as
/// keyword arguments. Unlike minijinja's built-in, nothing is HTML-escaped.
/// Jinja2's `iterable` test, as the templates were written for it: `none` and undefined are not
/// iterable. (minijinja's own says they are, so `tools is iterable and tools | length > 0` fails
/// on a request without tools, whose `tools` is `none`: Qwen3-Coder's template, Nemotron 3's.)
pub(super) fn python_iterable(v: &Value) -> bool {
    !v.is_none() && !v.is_undefined() && v.try_iter().is_ok()
}

pub(super) fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, JinjaError> {
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_owned()),
            None => {
                let n = i64::try_from(v)?;
                Some(" ".repeat(usize::try_from(n).unwrap_or(0)))
            }
        },
    };
    let (item_sep, key_sep) = match kwargs.get::<Option<Value>>("separators")? {
        Some(v) if !v.is_none() && !v.is_undefined() => {
            let parts: Vec<String> = v.try_iter()?.map(|p| p.to_string()).collect();
            match parts.as_slice() {
                [item, key] => (item.clone(), key.clone()),
                _ => {
                    return Err(JinjaError::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be a pair of strings",
                    ))
                }
            }
        }
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    let style = JsonStyle {
        indent,
        item_sep,
        key_sep,
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&mut out, value, &style, 0)?;
    Ok(Value::from(out))
}

fn write_json(out: &mut String, value: &Value, style: &JsonStyle, depth: usize) -> Result<(), JinjaError> {
    if depth > TOJSON_MAX_DEPTH {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            "tojson: value is nested too deeply",
        ));
    }
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if value.is_integer() {
                out.push_str(&value.to_string());
            } else {
                out.push_str(&python_float_repr(f64::try_from(value.clone())?));
            }
        }
        ValueKind::String => write_json_str(out, value.as_str().unwrap_or_default(), style.ensure_ascii),
        ValueKind::Bytes => write_json_str(
            out,
            &String::from_utf8_lossy(value.as_bytes().unwrap_or_default()),
            style.ensure_ascii,
        ),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, '[', ']', items.len(), style, depth, |out, i| {
                write_json(out, &items[i], style, depth + 1)
            })?;
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                let key = match key.as_str() {
                    Some(s) => s.to_owned(),
                    None if key.is_none() => "null".to_owned(),
                    None => key.to_string(),
                };
                entries.push((key, item));
            }
            if style.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_container(out, '{', '}', entries.len(), style, depth, |out, i| {
                write_json_str(out, &entries[i].0, style.ensure_ascii);
                out.push_str(&style.key_sep);
                write_json(out, &entries[i].1, style, depth + 1)
            })?;
        }
        _ => {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!("tojson: cannot serialize a value of kind {}", value.kind()),
            ))
        }
    }
    Ok(())
}

/// Writes `len` items between `open` and `close`, Python `json.dumps` style.
fn write_container(
    out: &mut String,
    open: char,
    close: char,
    len: usize,
    style: &JsonStyle,
    depth: usize,
    mut item: impl FnMut(&mut String, usize) -> Result<(), JinjaError>,
) -> Result<(), JinjaError> {
    out.push(open);
    if len == 0 {
        out.push(close);
        return Ok(());
    }
    for i in 0..len {
        if i > 0 {
            out.push_str(&style.item_sep);
        }
        if let Some(indent) = &style.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth + 1));
        }
        item(out, i)?;
    }
    if let Some(indent) = &style.indent {
        out.push('\n');
        out.push_str(&indent.repeat(depth));
    }
    out.push(close);
    Ok(())
}

/// A JSON string literal escaped as Python's `json.dumps` does.
fn write_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A float as Python's `repr` writes it (`1.0`, `0.1`, `1e+16`, `1.5e-07`, `NaN`).
pub(super) fn python_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if x.fract() == 0.0 && x.abs() < 1e16 {
        return format!("{x:.1}");
    }
    let debug = format!("{x:?}");
    match debug.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => debug,
    }
}

/// `json.dumps(value, ensure_ascii=False)`: what the templates' `tojson` writes, for text hearth
/// writes itself in a template's place (tool calls in a prompt).
pub(super) fn dumps(value: &serde_json::Value) -> String {
    let style = JsonStyle {
        indent: None,
        item_sep: ", ".to_owned(),
        key_sep: ": ".to_owned(),
        sort_keys: false,
        ensure_ascii: false,
    };
    let mut out = String::new();
    match write_json(&mut out, &Value::from_serialize(value), &style, 0) {
        Ok(()) => out,
        // A serde_json value always converts; keep serde's own text if it ever does not.
        Err(_) => value.to_string(),
    }
}
