//! heapwatch's hand-written push messages (proto/push/v1, proto/types/v1) held against
//! Pyroscope's own push.proto and types.proto, field by field, from the module the receiver
//! is built with (github.com/grafana/pyroscope/api in the Go module cache). A renamed or
//! renumbered field, a changed type or a new field Pyroscope added would fail here.

use std::collections::BTreeMap;
use std::fs;

use super::receiver;
use crate::util;

/// Fields of Pyroscope's messages that heapwatch leaves out on purpose.
const LEFT_OUT: &[(&str, &str)] = &[("RawProfileSeries", "annotations")];

/// name → (number, label, type, type name) for each field of each message.
type Fields = BTreeMap<String, BTreeMap<String, (i32, i32, i32, String)>>;

fn parse(name: &str, source: &str) -> (String, Fields, Vec<(String, String, String)>) {
    let file = protox_parse::parse(name, source).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    let mut messages = Fields::new();
    for message in &file.message_type {
        let fields = message
            .field
            .iter()
            .map(|f| {
                // Type names as written, without a leading dot or the package of the file.
                let type_name = f.type_name().trim_start_matches('.').to_string();
                (
                    f.name().to_string(),
                    (f.number(), f.label() as i32, f.r#type() as i32, type_name),
                )
            })
            .collect();
        messages.insert(message.name().to_string(), fields);
    }
    let methods = file
        .service
        .iter()
        .flat_map(|s| {
            s.method.iter().map(move |m| {
                (
                    format!("{}.{}", s.name(), m.name()),
                    m.input_type().trim_start_matches('.').to_string(),
                    m.output_type().trim_start_matches('.').to_string(),
                )
            })
        })
        .collect();
    (file.package().to_string(), messages, methods)
}

fn compare(theirs_path: &std::path::Path, ours_path: &std::path::Path) -> usize {
    let theirs_text = fs::read_to_string(theirs_path).unwrap();
    let ours_text = fs::read_to_string(ours_path).unwrap();
    let (their_package, theirs, their_methods) = parse("theirs.proto", &theirs_text);
    let (our_package, ours, our_methods) = parse("ours.proto", &ours_text);
    assert_eq!(our_package, their_package, "{}", ours_path.display());
    for method in &our_methods {
        assert!(
            their_methods.contains(method),
            "{method:?} is not in {}: {their_methods:?}",
            theirs_path.display()
        );
    }
    let mut checked = 0;
    for (message, fields) in &ours {
        let their_fields = theirs
            .get(message)
            .unwrap_or_else(|| panic!("message {message} is not in {}", theirs_path.display()));
        for (field, shape) in fields {
            assert_eq!(
                their_fields.get(field),
                Some(shape),
                "{message}.{field}: ours against {}",
                theirs_path.display()
            );
            checked += 1;
        }
        for field in their_fields.keys() {
            assert!(
                fields.contains_key(field)
                    || LEFT_OUT.contains(&(message.as_str(), field.as_str())),
                "{message}.{field} is in Pyroscope's schema but not in {}",
                ours_path.display()
            );
        }
    }
    checked
}

#[test]
fn the_push_messages_match_pyroscopes_own_schema_field_by_field() {
    let Some(module) = receiver::module_dir("github.com/grafana/pyroscope/api") else {
        return;
    };
    let proto = util::repo().join("proto");
    let push = compare(
        &module.join("push/v1/push.proto"),
        &proto.join("push/v1/push.proto"),
    );
    let types = compare(
        &module.join("types/v1/types.proto"),
        &proto.join("types/v1/types.proto"),
    );
    // PushRequest.series, RawProfileSeries.labels and .samples, RawSample.raw_profile and .ID;
    // LabelPair.name and .value.
    assert_eq!((push, types), (5, 2));
}
