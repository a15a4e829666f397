package applypatch

// Name is the tool's name. Models trained on Codex and the Agents SDK know
// the tool by it, which is the reason to keep it.
const Name = "apply_patch"

// Grammar is the Lark grammar of a patch, for a custom (freeform) tool whose
// format is {"type": "grammar", "syntax": "lark", "definition": Grammar}:
// the model's output is then constrained to it. It is the grammar the
// Agents SDK and Codex send, so a model sees the same format as there; Parse
// accepts every text it derives (and is lenient beyond it, see Parse).
const Grammar = `start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF`

// Description is the tool description the model sees. It says what the
// Agents SDK's description says, in our words: the envelope, the three
// operations, how much context to give and when to add @@ headers, since
// those are what decide whether a patch applies.
const Description = `Edit files with a patch. This is a freeform tool: send the patch text itself, not JSON and not a shell command.

A patch is a small, file-oriented diff format that is easy to check and safe to apply. It is wrapped in an envelope:

*** Begin Patch
[ one or more file operations ]
*** End Patch

Each file operation starts with a header saying what to do:

*** Add File: <path> - create a new file. Every line after the header is its content, each line starting with +.
*** Delete File: <path> - delete an existing file. Nothing follows the header.
*** Update File: <path> - change an existing file in place.

An Update File header may be followed by *** Move to: <new path> to rename the file as well.
Then come one or more hunks, each starting with a line @@ (optionally followed by a line of the file, see below).
Each line of a hunk starts with one character: a space for a line kept as is, - for a line removed, + for a line added.

Context lines:
- By default give 3 unchanged lines just above and 3 just below each change. When two changes are within 3 lines of each other, do not repeat the lines after the first change as lines before the second.
- When 3 lines of context could match in more than one place in the file, put the class or function the change is in on the @@ line:
@@ class BaseClass
[3 lines of context before]
-[old code]
+[new code]
[3 lines of context after]

- When even that is ambiguous (the same block occurs many times within one class or function), give several @@ lines, from the outermost to the innermost, to narrow down the place:

@@ class BaseClass
@@ def method():
[3 lines of context before]
-[old code]
+[new code]
[3 lines of context after]

- To change the last lines of a file, end the hunk with the line *** End of File.

The format, in full:
Patch := Begin { FileOp } End
Begin := "*** Begin Patch" NEWLINE
End := "*** End Patch" NEWLINE
FileOp := AddFile | DeleteFile | UpdateFile
AddFile := "*** Add File: " path NEWLINE { "+" line NEWLINE }
DeleteFile := "*** Delete File: " path NEWLINE
UpdateFile := "*** Update File: " path NEWLINE [ MoveTo ] Hunk { Hunk }
MoveTo := "*** Move to: " newPath NEWLINE
Hunk := "@@" [ header ] NEWLINE { HunkLine } [ "*** End of File" NEWLINE ]
HunkLine := (" " | "-" | "+") text NEWLINE

One patch can hold several operations:

*** Begin Patch
*** Add File: hello.txt
+Hello world
*** Update File: src/app.py
*** Move to: src/main.py
@@ def greet():
-print("Hi")
+print("Hello, world!")
*** Delete File: obsolete.txt
*** End Patch

Remember:
- Every operation needs its header (Add, Delete or Update File).
- Lines of a new file start with +, like added lines.
- Paths are relative to the workspace root, NEVER absolute.
- The patch is applied all or nothing: if any part fails, no file is changed, and the error says what to fix.`
