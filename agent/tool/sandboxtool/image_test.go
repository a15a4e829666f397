package sandboxtool

import "testing"

func TestImageType(t *testing.T) {
	for _, tc := range []struct {
		name, data, want string
	}{
		{"png", "\x89PNG\r\n\x1a\n....", "image/png"},
		{"jpeg", "\xff\xd8\xff\xe0..JFIF", "image/jpeg"},
		{"gif87", "GIF87a....", "image/gif"},
		{"gif89", "GIF89a....", "image/gif"},
		{"webp", "RIFF\x10\x00\x00\x00WEBPVP8 ", "image/webp"},
		{"riff but wave", "RIFF\x10\x00\x00\x00WAVEfmt ", ""},
		{"short riff", "RIFF", ""},
		// Formats the SDK passes but model image inputs refuse.
		{"bmp", "BM\x00\x00", ""},
		{"tiff", "II*\x00", ""},
		{"svg", "<svg xmlns='http://www.w3.org/2000/svg'/>", ""},
		{"empty", "", ""},
		{"text", "hello", ""},
	} {
		if got := imageType([]byte(tc.data)); got != tc.want {
			t.Errorf("%s: imageType = %q, want %q", tc.name, got, tc.want)
		}
	}
}
