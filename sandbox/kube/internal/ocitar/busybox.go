package ocitar

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// busyboxPath is where Debian's busybox-static installs busybox.
const busyboxPath = "/bin/busybox"

// BusyboxFiles returns the files of a minimal Linux image: the host's
// static busybox as /bin/busybox with a link for each of its applets in
// /bin (sh, ls, sleep, ...), and an empty /tmp. It fails if busybox is
// missing or dynamically linked: an image has no libc to link against.
func BusyboxFiles() ([]File, error) {
	data, err := os.ReadFile(busyboxPath)
	if err != nil {
		return nil, fmt.Errorf("reading busybox (install busybox-static, scripts/deps.sh test does): %w", err)
	}
	f, err := elf.Open(busyboxPath)
	if err != nil {
		return nil, fmt.Errorf("reading busybox: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%s is dynamically linked: install busybox-static", busyboxPath)
		}
	}
	out, err := exec.Command(busyboxPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("listing busybox's applets: %w", err)
	}
	files := []File{
		{Path: "bin/busybox", Data: data},
		{Path: "tmp", Dir: true, Mode: 0o1777},
		{Path: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")},
		{Path: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		files = append(files, File{Path: "bin/" + applet, Link: "busybox"})
	}
	return files, nil
}
