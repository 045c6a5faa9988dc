//! `--header` and `--push-header`: "Name: value", or `@FILE` holding such lines, which keeps a
//! token out of the process list, shell history and CI logs. A header's value is never
//! repeated in an error: the flag, the file and the line number say which one is wrong.

use heapwatch::source::Secret;

use super::CliError;

/// The headers given to `flag`, each `@FILE` read (one header a line, blank lines skipped).
pub fn read_headers(flag: &str, given: &[String]) -> Result<Vec<(String, Secret)>, CliError> {
    let mut headers = Vec::new();
    for arg in given {
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
                    headers.push(split(line).ok_or_else(|| {
                        CliError::Usage(format!(
                            "{flag} @{file}: line {} is not \"Name: value\"",
                            i + 1
                        ))
                    })?);
                }
                if headers.len() == before {
                    return Err(CliError::Usage(format!(
                        "{flag} @{file}: {file} holds no header (expected lines \"Name: value\")"
                    )));
                }
            }
            None => headers.push(split(arg).ok_or_else(|| {
                CliError::Usage(format!(
                    "{flag}: expected \"Name: value\", e.g. \"Authorization: Bearer TOKEN\", \
                     or @FILE (what was given is not repeated here: it may be a secret)"
                ))
            })?),
        }
    }
    Ok(headers)
}

fn split(line: &str) -> Option<(String, Secret)> {
    let (name, value) = line.split_once(':')?;
    Some((name.trim().to_string(), Secret::new(value.trim())))
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
