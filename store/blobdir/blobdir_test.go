package blobdir

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.RunBlobs(t, func(t *testing.T) store.Blobs { return New(t.TempDir()) })
}

// A blob is the file of its name under the directory (a server's older
// snapshots are found where they were), and a put cut short leaves no
// temp file behind.
func TestFiles(t *testing.T) {
	dir := t.TempDir()
	d := New(dir)
	if _, err := d.PutBlob(context.Background(), "snapshots/team/snap.tar", bytes.NewReader([]byte("whole"))); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "snapshots/team/snap.tar")); err != nil || string(data) != "whole" {
		t.Errorf("the blob's file: %q, %v", data, err)
	}
	boom := errors.New("boom")
	if _, err := d.PutBlob(context.Background(), "snapshots/team/half.tar", io.MultiReader(bytes.NewReader([]byte("half")), &errReader{boom})); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "snapshots/team")); len(ents) != 1 {
		t.Errorf("after a failed put the directory holds %v, want only the first blob", ents)
	}
}

type errReader struct{ err error }

func (e *errReader) Read([]byte) (int, error) { return 0, e.err }
