//! The documentation holds together: every relative link in README.md, ARCHITECTURE.md,
//! CHANGELOG.md and the manual under docs/ leads to a file that exists (and, with a `#anchor`, to
//! a heading or an `<a id>` of that file, by GitHub's slug rules), and every key of the example
//! configuration, `config/mysql-lb.yaml`, is documented in the manual (docs/src).
//!
//! Reading files only: no server, no network, no build of the proxy.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Every `.md` file under `dir`, sorted.
fn markdown_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let entries =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("list {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The Markdown files whose links are checked: the three at the top and the whole of docs/.
fn documentation() -> Vec<PathBuf> {
    let root = repo();
    let mut files: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "CHANGELOG.md"]
        .iter()
        .map(|name| root.join(name))
        .collect();
    files.extend(markdown_under(&root.join("docs")));
    files
}

/// The lines of a Markdown text outside fenced code blocks, with their 1-based numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
        } else if !fenced {
            lines.push((i + 1, line));
        }
    }
    lines
}

/// The targets of the inline links and images (`[text](target)`, `![alt](target)`) and of the
/// reference definitions (`[label]: target`) on the prose lines, with their line numbers. A link
/// whose text runs over several lines is found by its `](`, on the line where the target is.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find(')').unwrap_or(after.len());
            // `(target "title")`: the target ends at the first space.
            let target = after[..end].split_whitespace().next().unwrap_or("");
            found.push((number, target.to_string()));
            rest = &after[end..];
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') && !trimmed.starts_with("[^") {
            if let Some(at) = trimmed.find("]: ") {
                let target = trimmed[at + 3..].split_whitespace().next().unwrap_or("");
                found.push((number, target.to_string()));
            }
        }
    }
    found
}

/// A heading's anchor as GitHub (and mdBook) make it: lower case, letters, digits, `-` and `_`
/// kept, spaces made `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors a Markdown file offers: its headings' slugs (a repeated one numbered `-1`, `-2`,
/// as GitHub does) and the `<a id="...">` / `<a name="...">` it holds.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in prose(text) {
        if line.starts_with('#') {
            let base = slug(line.trim_start_matches('#'));
            let times = seen.entry(base.clone()).or_insert(0);
            anchors.insert(if *times == 0 {
                base.clone()
            } else {
                format!("{base}-{times}")
            });
            *times += 1;
        }
        for attribute in ["<a id=\"", "<a name=\""] {
            let mut rest = line;
            while let Some(at) = rest.find(attribute) {
                let after = &rest[at + attribute.len()..];
                let end = after.find('"').unwrap_or(after.len());
                anchors.insert(after[..end].to_string());
                rest = &after[end..];
            }
        }
    }
    anchors
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = repo();
    let mut checked = 0;
    let mut broken = Vec::new();
    for file in documentation() {
        let text = read(&file);
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (line, target) in links(&text) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            if path.is_empty() && anchor.is_none() {
                broken.push(format!("{shown}:{line}: empty link target"));
                continue;
            }
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().expect("a file's directory").join(path)
            };
            if !resolved.exists() {
                broken.push(format!(
                    "{shown}:{line}: `{target}`: no such file {}",
                    resolved.display()
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if resolved.extension().is_some_and(|ext| ext == "md")
                && !anchors(&read(&resolved)).contains(anchor)
            {
                broken.push(format!(
                    "{shown}:{line}: `{target}`: no heading or <a id> gives #{anchor} in {}",
                    resolved.display()
                ));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "{} of {checked} relative links are broken:\n{}",
        broken.len(),
        broken.join("\n")
    );
    assert!(
        checked > 100,
        "only {checked} relative links found: is the parser still right?"
    );
}

/// A key of the example configuration, by its path from the top (`health_check.password_file`),
/// with the line it is written on when it is in a commented-out example.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    path: Vec<String>,
    line: Option<usize>,
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}`", self.path.join("."))?;
        match self.line {
            Some(line) => write!(f, " (commented-out example, config/mysql-lb.yaml:{line})"),
            None => write!(f, " (config/mysql-lb.yaml)"),
        }
    }
}

/// Every key path of a YAML value under `parent`: the keys of mappings, those of mappings inside
/// sequences (a `backends:` entry's `address`) included.
fn key_paths(
    value: &serde_yaml::Value,
    parent: &[String],
    line: Option<usize>,
    out: &mut Vec<Key>,
) {
    match value {
        serde_yaml::Value::Mapping(map) => {
            for (key, value) in map {
                let name = match key {
                    serde_yaml::Value::String(name) => name.clone(),
                    other => panic!("a key that is not a string under {parent:?}: {other:?}"),
                };
                let mut path = parent.to_vec();
                if parent == ["pools"] {
                    // A pool's name, which the example chooses: the manual writes `pools.NAME`.
                    path.push("NAME".to_string());
                } else {
                    path.push(name);
                    out.push(Key {
                        path: path.clone(),
                        line,
                    });
                }
                key_paths(value, &path, line, out);
            }
        }
        serde_yaml::Value::Sequence(items) => {
            for item in items {
                key_paths(item, parent, line, out);
            }
        }
        _ => {}
    }
}

/// How far a line is indented, and its text after that.
fn indented(line: &str) -> (usize, &str) {
    let text = line.trim_start_matches(' ');
    (line.len() - text.len(), text)
}

/// `name` when `text` starts with a configuration key, `name:` followed by a space or nothing.
fn key_at_start(text: &str) -> Option<&str> {
    let (name, rest) = text.split_once(':')?;
    let is_key = !name.is_empty()
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    (is_key && (rest.is_empty() || rest.starts_with(' '))).then_some(name)
}

/// The commented-out examples of the example configuration, each as (the live keys it sits
/// under, its first line's number, its YAML). An example starts with a comment `# key: ...`
/// (one space after the `#`, a lower-case key: prose starts otherwise) and goes on while the next
/// lines are comments at the same place indented further (`#   mode: transaction`).
fn commented_examples(text: &str) -> Vec<(Vec<String>, usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut live: Vec<(usize, String)> = Vec::new();
    let mut examples = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let (indent, text) = indented(lines[i]);
        if text.is_empty() {
            i += 1;
            continue;
        }
        let Some(comment) = text.strip_prefix('#') else {
            if let Some(name) = key_at_start(text) {
                live.retain(|(at, _)| *at < indent);
                live.push((indent, name.to_string()));
            }
            i += 1;
            continue;
        };
        let starts_example = comment
            .strip_prefix(' ')
            .is_some_and(|yaml| key_at_start(yaml).is_some());
        if !starts_example {
            i += 1;
            continue;
        }
        let first = i;
        let mut yaml = vec![comment[1..].to_string()];
        i += 1;
        while i < lines.len() {
            let (next_indent, next) = indented(lines[i]);
            match next.strip_prefix("#  ") {
                Some(more) if next_indent == indent => yaml.push(format!(" {more}")),
                _ => break,
            }
            i += 1;
        }
        let parents = live
            .iter()
            .filter(|(at, _)| *at < indent)
            .map(|(_, name)| name.clone())
            .collect();
        examples.push((parents, first + 1, yaml.join("\n")));
    }
    examples
}

/// Every key of `config/mysql-lb.yaml`: those set in it and those of its commented-out examples.
fn example_config_keys() -> Vec<Key> {
    let text = read(&repo().join("config/mysql-lb.yaml"));
    let value: serde_yaml::Value =
        serde_yaml::from_str(&text).expect("config/mysql-lb.yaml is YAML");
    let mut keys = Vec::new();
    key_paths(&value, &[], None, &mut keys);
    for (parents, line, yaml) in commented_examples(&text) {
        let value: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap_or_else(|e| {
            panic!(
                "the commented-out example at config/mysql-lb.yaml:{line} is not YAML: {e}\n{yaml}"
            )
        });
        key_paths(&value, &parents, Some(line), &mut keys);
    }
    keys.sort();
    keys.dedup_by(|a, b| a.path == b.path);
    keys
}

/// The words the manual sets as code: every identifier inside an inline code span, and every
/// `key:` of its fenced code blocks (its YAML examples).
fn words_the_manual_shows_as_code() -> BTreeSet<String> {
    let identifiers = |text: &str| -> Vec<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|word| !word.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut words = BTreeSet::new();
    for file in markdown_under(&repo().join("docs/src")) {
        let text = read(&file);
        let mut fenced = false;
        // A code span may run over a line end, never over a blank line.
        let mut in_span = false;
        for line in text.lines() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("```") {
                fenced = !fenced;
                in_span = false;
                continue;
            }
            if trimmed.is_empty() {
                in_span = false;
            }
            if fenced {
                // `key: value`, `- key: value`, `{key: value, other: value}`.
                for piece in trimmed.split(['{', ',', '-']) {
                    if let Some(name) = key_at_start(piece.trim_start()) {
                        words.insert(name.to_string());
                    }
                }
            } else {
                for (i, piece) in line.split('`').enumerate() {
                    if i > 0 {
                        in_span = !in_span;
                    }
                    if in_span {
                        words.extend(identifiers(piece));
                    }
                }
            }
        }
    }
    words
}

#[test]
fn every_key_of_the_example_config_is_documented() {
    let keys = example_config_keys();
    let shown = words_the_manual_shows_as_code();
    let undocumented: Vec<String> = keys
        .iter()
        .filter(|key| !shown.contains(key.path.last().expect("a key has a name")))
        .map(|key| key.to_string())
        .collect();
    assert!(
        undocumented.is_empty(),
        "keys of config/mysql-lb.yaml that no chapter of docs/src shows as code (`key`, \
         `parent.key`, or `key:` in a YAML example):\n{}",
        undocumented.join("\n")
    );
    assert!(
        keys.len() > 60,
        "only {} keys found in config/mysql-lb.yaml: is the reader still right?",
        keys.len()
    );
}
