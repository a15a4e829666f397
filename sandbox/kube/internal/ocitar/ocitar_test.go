package ocitar

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// TestWriteLayout checks the layout ctr reads: every blob under its
// digest, the index naming the image, and the layer holding the files.
func TestWriteLayout(t *testing.T) {
	var buf bytes.Buffer
	err := Write(&buf, Image{
		Ref: "cove.local/test:1", Cmd: []string{"sh"},
		Files: []File{
			{Path: "bin/tool", Data: []byte("#!/bin/sh\n")},
			{Path: "bin/sh", Link: "tool"},
			{Path: "tmp", Dir: true, Mode: 0o1777},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name] = data
	}
	for name, data := range files {
		if hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && hexDigest != "" {
			sum := sha256.Sum256(data)
			if got := hex.EncodeToString(sum[:]); got != hexDigest {
				t.Errorf("blob %s has digest %s", name, got)
			}
		}
	}
	var index struct {
		Manifests []struct {
			Digest      string
			Annotations map[string]string
		}
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] != "cove.local/test:1" {
		t.Fatalf("index = %+v", index)
	}
	var manifest struct{ Layers []struct{ Digest string } }
	if err := json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(index.Manifests[0].Digest, "sha256:")], &manifest); err != nil {
		t.Fatal(err)
	}
	layer := files["blobs/sha256/"+strings.TrimPrefix(manifest.Layers[0].Digest, "sha256:")]
	var got []string
	lr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := lr.Next()
		if err != nil {
			break
		}
		got = append(got, h.Name+" "+h.Linkname)
	}
	want := []string{"bin/ ", "bin/tool ", "bin/sh tool", "tmp/ "}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("layer = %q, want %q", got, want)
	}
}

func TestWriteRejects(t *testing.T) {
	for _, img := range []Image{
		{Ref: "busybox"},
		{Ref: "cove.local/x"},
		{Ref: "cove.local/x:1", Files: []File{{Path: "../etc/passwd"}}},
	} {
		if err := Write(io.Discard, img); err == nil {
			t.Errorf("Write(%+v) = nil, want an error", img)
		}
	}
}
