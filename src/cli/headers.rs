//! `--header` and `--push-header`: "Name: value", or `@FILE` holding such lines, which keeps a
//! token out of the process list, shell history and CI logs. A header's value is never
//! repeated in an error: the flag, the file and the line number say which one is wrong.

use heapwatch::source::Secret;
use heapwatch::units::ordinal;

use super::CliError;

/// The headers given to `flag`, each `@FILE` read (one header a line, blank lines skipped).
/// Each is checked here, so that no later error has to show it: a name is an HTTP token, a
/// value holds no control character.
pub fn read_headers(flag: &str, given: &[String]) -> Result<Vec<(String, Secret)>, CliError> {
    let mut headers = Vec::new();
    for (n, arg) in given.iter().enumerate() {
        match arg.strip_prefix('@') {
            Some(file) => {
                let text = std::fs::read_to_string(file).map_err(|e| {
                    CliError::Usage(format!("{flag} @{file}: cannot read {file}: {e}"))
                })?;
                let before = headers.len();
                for (i, line) in text.lines().enumerate() {
                    if line.trim().is_empty() {
                        continue;
                    }
                    let header = split(line).map_err(|why| {
                        CliError::Usage(format!("{flag} @{file}: line {}: {why}", i + 1))
                    })?;
                    headers.push(header);
                }
                if headers.len() == before {
                    return Err(CliError::Usage(format!(
                        "{flag} @{file}: {file} holds no header (expected lines \"Name: value\")"
                    )));
                }
            }
            None => {
                let header = split(arg).map_err(|why| {
                    CliError::Usage(format!(
                        "{flag} (the {} given): {why}, e.g. \"Authorization: Bearer TOKEN\", \
                         or @FILE (what was given is not repeated here: it may be a secret)",
                        ordinal(n + 1)
                    ))
                })?;
                headers.push(header);
            }
        }
    }
    Ok(headers)
}

/// "Name: value", checked; what is wrong, in words that do not repeat it.
fn split(line: &str) -> Result<(String, Secret), &'static str> {
    let (name, value) = line
        .split_once(':')
        .ok_or("expected \"Name: value\" (there is no ':')")?;
    let name = name.trim();
    if name.is_empty() {
        return Err("expected \"Name: value\" (nothing before the ':')");
    }
    if !name.bytes().all(is_token_char) {
        return Err(
            "what comes before the ':' is not a header name (letters, digits and \
             !#$%&'*+-.^_`|~, no spaces)",
        );
    }
    let value = value.trim();
    if !value
        .bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
    {
        return Err(
            "the value holds a character a header cannot carry (a control character, a line \
             break or a letter outside ASCII)",
        );
    }
    Ok((name.to_string(), Secret::new(value)))
}

/// RFC 9110 `tchar`.
fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_holds_headers_and_errors_never_repeat_a_value() {
        let dir = std::env::temp_dir().join(format!("heapwatch-headers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("auth");
        std::fs::write(&file, "Authorization: Bearer s3cret\n\nX-Scope-OrgID: 7\n").unwrap();
        let given = vec![format!("@{}", file.display()), "X-A: b".to_string()];
        let headers = read_headers("--header", &given).unwrap();
        let shown: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.expose()))
            .collect();
        assert_eq!(
            shown,
            [
                ("Authorization", "Bearer s3cret"),
                ("X-Scope-OrgID", "7"),
                ("X-A", "b")
            ]
        );

        let err = read_headers("--header", &["Bearer s3cret".into()]).unwrap_err();
        assert!(!err.to_string().contains("s3cret"), "{err}");
        // A ':' inside the token: what precedes it is no header name, and is not shown.
        let err = read_headers("--header", &["X-A: b".into(), "Bearer s3c:ret".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "--header (the 2nd given): what comes before the ':' is not a header name"
            ) && !err.contains("s3c"),
            "{err}"
        );
        let err = read_headers("--header", &["X-Token: s3c\u{7}ret".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("(the 1st given): the value holds a character a header cannot carry")
                && !err.contains("s3c"),
            "{err}"
        );
        std::fs::write(&file, "Authorization: Bearer s3cret\nBearer s3cret\n").unwrap();
        let err = read_headers("--header", &given).unwrap_err().to_string();
        assert!(err.contains("line 2") && !err.contains("s3cret"), "{err}");
        std::fs::write(&file, "\n").unwrap();
        let err = read_headers("--header", &given).unwrap_err().to_string();
        assert!(err.contains("holds no header"), "{err}");
        let missing = dir.join("missing");
        let err = read_headers("--push-header", &[format!("@{}", missing.display())])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("cannot read {}", missing.display())),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
