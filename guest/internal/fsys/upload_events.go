package fsys

import (
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// An upload (writeFile) streams into a temporary file and renames it over
// its target, so no reader ever sees half a file and a failed upload
// leaves the old one. envd writes in place instead, and E2B's SDK users
// watch for what that gives: a create and a write of a new file, a write
// of a replaced one. Watches translate: the daemon notes each upload's
// temporary name, and a watch drops the events of a noted name and
// reports its rename onto the target as envd's events on the target.
// Only names the daemon itself made are translated (random, noted before
// the file exists): a file the sandbox names alike is reported as it is,
// unless it takes the very name of a recent upload, which hides only the
// sandbox's own changes from its own watches.

const (
	// uploadPrefix starts the name of an upload's temporary file.
	uploadPrefix = ".cove-upload-"
	// uploadNoteKeep is how long a watch may lag behind an upload and
	// still translate its events; maxUploadNotes bounds the notes kept.
	uploadNoteKeep = 10 * time.Minute
	maxUploadNotes = 4096
	// maxPendingRenames bounds the renames a watch waits to see the end
	// of (a rename in one directory gives both halves at once).
	maxPendingRenames = 64
)

// uploadNote is what a watch needs to know of one upload.
type uploadNote struct {
	replaced bool // the target existed: envd would report a write only
	at       time.Time
}

// uploadNotes are the temporary names of recent uploads. The zero value
// is ready for use.
type uploadNotes struct {
	mu    sync.Mutex
	notes map[string]uploadNote
	order []string // oldest first
}

// add notes the temporary name of an upload before the file is made.
func (u *uploadNotes) add(name string, replaced bool) {
	now := time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.notes == nil {
		u.notes = map[string]uploadNote{}
	}
	drop := 0
	for drop < len(u.order) && (len(u.order)-drop >= maxUploadNotes || now.Sub(u.notes[u.order[drop]].at) > uploadNoteKeep) {
		delete(u.notes, u.order[drop])
		drop++
	}
	u.order = append(u.order[drop:], name)
	u.notes[name] = uploadNote{replaced: replaced, at: now}
}

// get returns the note of a temporary name.
func (u *uploadNotes) get(name string) (uploadNote, bool) {
	if !strings.HasPrefix(name, uploadPrefix) {
		return uploadNote{}, false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	n, ok := u.notes[name]
	return n, ok
}

// translateUpload turns the events of an upload's temporary file into
// envd's: it returns the mask to report for ev (0 for nothing) and
// whether ev was an upload's at all. The temporary file's own events are
// dropped; the half of its rename that names the target becomes a create
// and a write, or a write when the upload replaced a file.
func (d *dirWatch) translateUpload(ev inotifyEvent) (uint32, bool) {
	if ev.mask&unix.IN_ISDIR != 0 {
		return 0, false
	}
	if note, ok := d.f.uploads.get(ev.name); ok {
		if ev.mask&unix.IN_MOVED_FROM != 0 && ev.cookie != 0 {
			if len(d.renames) >= maxPendingRenames {
				clear(d.renames)
			}
			d.renames[ev.cookie] = note
		}
		return 0, true
	}
	if ev.mask&unix.IN_MOVED_TO == 0 || ev.cookie == 0 {
		return 0, false
	}
	note, ok := d.renames[ev.cookie]
	if !ok {
		return 0, false
	}
	delete(d.renames, ev.cookie)
	if note.replaced {
		return unix.IN_MODIFY, true
	}
	return unix.IN_CREATE | unix.IN_MODIFY, true
}
