package mountinfo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRead(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mountinfo")
	data := "22 1 0:21 / /proc rw,nosuid - proc proc rw\n" +
		"80 22 0:50 / /var/lib/cove/sb\\0401/rootfs rw - overlay overlay rw,lowerdir=/t,upperdir=/var/lib/cove/sb\\0401/disk/mnt/upper,workdir=/w\n" +
		"81 80 7:3 / /var/lib/cove/sb\\0401/rootfs/x rw shared:5 - ext4 /dev/loop3 rw\n"
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	ms, err := Read(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("got %d mounts, want 3: %+v", len(ms), ms)
	}
	if got, want := ms[1].Point, "/var/lib/cove/sb 1/rootfs"; got != want {
		t.Errorf("point %q, want %q (unescaped)", got, want)
	}
	if got, want := ms[1].Super["upperdir"], "/var/lib/cove/sb 1/disk/mnt/upper"; ms[1].FSType != "overlay" || got != want {
		t.Errorf("overlay %q upperdir %q, want %q", ms[1].FSType, got, want)
	}
	if ms[2].FSType != "ext4" || ms[2].Point != "/var/lib/cove/sb 1/rootfs/x" {
		t.Errorf("optional fields before the separator: got %+v", ms[2])
	}
	for _, tc := range []struct {
		dir, p string
		want   bool
	}{{"/a", "/a", true}, {"/a", "/a/b", true}, {"/a", "/ab", false}, {"/a/b", "/a", false}} {
		if got := Within(tc.dir, tc.p); got != tc.want {
			t.Errorf("Within(%q, %q) = %v, want %v", tc.dir, tc.p, got, tc.want)
		}
	}
}
