use super::*;

/// A tiny pclntab by hand: two functions, the first with a line table and an inline
/// tree whose index table says `[entry, entry+4)` is inlined call 0.
pub(crate) fn fabricated() -> Pclntab {
    let mut d = vec![0u8; 72];
    d[0..4].copy_from_slice(&MAGIC_GO120.to_le_bytes());
    d[6] = 1;
    d[7] = 8;
    let names = b"\0main.outer\0main.inner\0main.other\0";
    let files = b"\0/src/a.go\0";
    let funcname = d.len();
    d.extend_from_slice(names);
    let cutab = d.len();
    d.extend_from_slice(&1u32.to_le_bytes()); // file 0 of cu 0 → filetab offset 1
    let filetab = d.len();
    d.extend_from_slice(files);
    let pctab = d.len();
    d.push(0); // offset 0 means "no table"
    // line table: value 10 (zigzag +11 from -1 → 22) for 4 bytes, then 12 (+2 → 4) for 6.
    let line_off = d.len() - pctab;
    d.extend_from_slice(&[22, 4, 4, 6, 0]);
    let file_off = d.len() - pctab;
    d.extend_from_slice(&[2, 10, 0]); // file 0 for 10 bytes
    let inl_off = d.len() - pctab;
    d.extend_from_slice(&[2, 4, 1, 6, 0]); // index 0 for 4 bytes, then -1 for 6
    let functab = d.len();
    let nfunc = 2usize;
    let func0 = 8 * (nfunc + 1);
    let func1 = func0 + FUNC_FIXED + 4 * 3 + 4 * 4;
    for (entry, off) in [(0u32, func0), (10, func1), (20, 0)] {
        d.extend_from_slice(&entry.to_le_bytes());
        d.extend_from_slice(&(off as u32).to_le_bytes());
    }
    let mut func = |entry: u32, name: u32, line: u32, file: u32, inl: Option<u32>| {
        let mut f = Vec::new();
        for v in [entry, name, 0, 0, 0, file, line, 3, 0, 7] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        f.extend_from_slice(&[0, 0, 0, 4]);
        for v in [0, 0, inl.unwrap_or(0)] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        for v in [u32::MAX, u32::MAX, u32::MAX, inl.map_or(u32::MAX, |_| 0)] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        d.extend_from_slice(&f);
    };
    func(0, 1, line_off as u32, file_off as u32, Some(inl_off as u32));
    func(10, 23, line_off as u32, file_off as u32, None);
    for (i, v) in [
        nfunc as u64,
        1,
        0,
        funcname as u64,
        cutab as u64,
        filetab as u64,
        pctab as u64,
        functab as u64,
    ]
    .into_iter()
    .enumerate()
    {
        d[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
    }
    // inlinedCall 0: main.inner (name offset 12), called from entry+6, starting at line 3.
    let mut inl = vec![0u8; 4];
    for v in [12u32, 6, 3] {
        inl.extend_from_slice(&v.to_le_bytes());
    }
    let funcdata = FuncData {
        base: 0x9000,
        section_addr: 0x9000,
        section: inl,
    };
    Pclntab::parse(d, 0x1000, funcdata).unwrap()
}

#[test]
fn finds_functions_and_their_bounds() {
    let t = fabricated();
    assert_eq!(t.len(), 2);
    assert_eq!(t.find_func(0x1000).map(|f| f.entry), Some(0x1000));
    assert_eq!(t.find_func(0x1009).map(|f| f.entry), Some(0x1000));
    assert_eq!(t.find_func(0x100a).map(|f| f.entry), Some(0x100a));
    assert_eq!(t.find_func(0x1014), None, "past the end sentinel");
    assert_eq!(t.find_func(0xfff), None);
    assert_eq!(
        t.func_name(t.find_func(0x100b).unwrap()),
        Some("main.other")
    );
}

#[test]
fn the_text_base_is_the_module_data_s_and_split_text_maps_through_its_sections() {
    // The system linker's layout: the same table, Go's text 0x100 further on.
    let t = fabricated().with_text(0x1100, Vec::new());
    assert_eq!(t.find_func(0x1000), None, "C start-up code, not Go");
    assert_eq!(t.find_func(0x110b).map(|f| f.entry), Some(0x110a));
    assert_eq!(t.extent().2..t.extent().3, 0x1100..0x1114);
    // Two text sections (as the linker splits very large text on some architectures):
    // offsets [0, 10) at 0x1000, [10, 20) moved to 0x5000.
    let split = fabricated().with_text(
        0x1000,
        vec![
            TextSect {
                vaddr: 0,
                end: 10,
                base: 0x1000,
            },
            TextSect {
                vaddr: 10,
                end: 20,
                base: 0x5000,
            },
        ],
    );
    assert_eq!(split.find_func(0x1003).map(|f| f.entry), Some(0x1000));
    assert_eq!(split.find_func(0x100b), None, "between the sections");
    let f = split.find_func(0x5001).unwrap();
    assert_eq!((f.entry, split.func_name(f)), (0x5000, Some("main.other")));
    assert_eq!(
        split.text_addr(20),
        0x500a,
        "the end sentinel belongs to the last"
    );
}

#[test]
fn a_pc_in_an_inlined_call_is_the_inlined_frame_and_its_parent_is_the_caller() {
    let t = fabricated();
    // Return PC 0x1003 → pc 0x1002: inside inlined call 0 (main.inner), line 10.
    let f = t.frame(0x1003).unwrap();
    assert_eq!(
        (
            f.function.as_str(),
            f.file.as_str(),
            f.line,
            f.start_line,
            f.inlined
        ),
        ("main.inner", "/src/a.go", 10, 3, true)
    );
    // Return PC 0x1007 → pc 0x1006: the caller itself, line 12.
    let f = t.frame(0x1007).unwrap();
    assert_eq!(
        (f.function.as_str(), f.line, f.start_line, f.inlined),
        ("main.outer", 12, 7, false)
    );
    // FuncForPC looks at the PC itself: 0x1004 is already outside the inlined range.
    assert_eq!(t.func_for_pc(0x1003).as_deref(), Some("main.inner"));
    assert_eq!(t.func_for_pc(0x1004).as_deref(), Some("main.outer"));
}

#[test]
fn a_cut_stack_ending_inside_an_inlined_call_gets_its_caller_back() {
    let t = fabricated();
    let mut stack = vec![0x100b, 0x1003];
    t.expand_final_inline(&mut stack);
    assert_eq!(stack, vec![0x100b, 0x1003, 0x1007]);
    let mut plain = vec![0x1007];
    t.expand_final_inline(&mut plain);
    assert_eq!(plain, vec![0x1007]);
}

#[test]
fn garbage_is_refused_not_trusted() {
    assert_eq!(
        Pclntab::parse(vec![1, 2], 0, FuncData::default()).unwrap_err(),
        PclntabError::Short
    );
    let mut old = vec![0u8; 72];
    old[0..4].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    assert_eq!(
        Pclntab::parse(old, 0, FuncData::default()).unwrap_err(),
        PclntabError::Magic(0xffff_fff0)
    );
    let mut huge = vec![0u8; 72];
    huge[0..4].copy_from_slice(&MAGIC_GO120.to_le_bytes());
    huge[7] = 8;
    huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert_eq!(
        Pclntab::parse(huge, 0, FuncData::default()).unwrap_err(),
        PclntabError::FunctionTable
    );
}
