package muster

import (
	"strings"
	"testing"
)

func TestParseConstraints(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Constraints
	}{
		{"empty", "", Constraints{}},
		{"arch and cores", "arch=arm64 cores=2", Constraints{Arch: "arm64", Cores: 2}},
		{"mem default unit", "mem=512", Constraints{Mem: 512}},
		{"mem G", "mem=4G", Constraints{Mem: 4096}},
		{"mem fraction rounds up", "mem=1.5G", Constraints{Mem: 1536}},
		{"root-disk T", "root-disk=1T", Constraints{RootDisk: 1 << 20}},
		{"lists", "zones=a,b spaces=db,^public tags=x", Constraints{Zones: []string{"a", "b"}, Spaces: []string{"db", "^public"}, Tags: []string{"x"}}},
		{"instance type", "instance-type=s1.large", Constraints{InstanceType: "s1.large"}},
		{"empty value unsets", "arch=", Constraints{}},
		{"extra spaces", "  cores=4   mem=2G ", Constraints{Cores: 4, Mem: 2048}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConstraints(tt.in)
			if err != nil {
				t.Fatalf("ParseConstraints(%q): %v", tt.in, err)
			}
			if got.String() != tt.want.String() {
				t.Fatalf("got %q, want %q", got.String(), tt.want.String())
			}
		})
	}
}

func TestParseConstraintsErrorsNameKeyAndValue(t *testing.T) {
	tests := []struct {
		in   string
		want []string // substrings of the error
	}{
		{"foo=bar", []string{`"foo"`}},
		{"cores", []string{`"cores"`, "key=value"}},
		{"cores=two", []string{`"cores"`, `"two"`}},
		{"cores=-1", []string{`"cores"`, `"-1"`}},
		{"mem=4X", []string{`"mem"`, `"4X"`}},
		{"mem=-1G", []string{`"mem"`}},
		{"mem=NaN", []string{`"mem"`}},
		{"mem=1e3", []string{`"mem"`}},
		{"mem=99999999999P", []string{`"mem"`, "too large"}},
		{"arch=sparc", []string{`"arch"`, `"sparc"`}},
		{"zones=a,,b", []string{`"zones"`}},
		{"zones=a,a", []string{`"zones"`, "twice"}},
		{"zones=^a", []string{`"zones"`}},
		{"spaces=a b", []string{`"b"`}},
		{"cores=1 cores=2", []string{`"cores"`, "more than once"}},
		{"instance-type=a=b", []string{`"instance-type"`}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := ParseConstraints(tt.in)
			if err == nil {
				t.Fatalf("ParseConstraints(%q) succeeded, want an error", tt.in)
			}
			if ErrorCode(err) != EInvalid {
				t.Errorf("code %q, want %q", ErrorCode(err), EInvalid)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %s", err, w)
				}
			}
		})
	}
}

func TestConstraintsRoundTrip(t *testing.T) {
	for _, s := range []string{
		"arch=amd64 cores=2 mem=4G root-disk=10G instance-type=s1.small zones=a,b spaces=db,^public tags=^gpu,x",
		"mem=1536M",
		"cores=8",
		"",
	} {
		c, err := ParseConstraints(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.String(); got != s {
			t.Errorf("String(Parse(%q)) = %q", s, got)
		}
	}
}

func TestConstraintHelpers(t *testing.T) {
	c := MustParseConstraints("zones=a,b spaces=db,^public,web")
	if got := strings.Join(c.IncludedSpaces(), ","); got != "db,web" {
		t.Errorf("IncludedSpaces: got %q, want db,web", got)
	}
	if got := strings.Join(c.ExcludedSpaces(), ","); got != "public" {
		t.Errorf("ExcludedSpaces: got %q, want public", got)
	}
	if !c.AllowsZone("a") || c.AllowsZone("c") {
		t.Error("AllowsZone disagrees with zones=a,b")
	}
	if (Constraints{}).ArchOrDefault() != "amd64" || MustParseConstraints("arch=arm64").ArchOrDefault() != "arm64" {
		t.Error("ArchOrDefault wrong")
	}
}

func TestSizes(t *testing.T) {
	for in, want := range map[string]uint64{"1": 1, "1M": 1, "2G": 2048, "0.5G": 512, "1P": 1 << 30,
		"4GB": 4096, "4GiB": 4096, "512MB": 512, "512MiB": 512, "1TB": 1 << 20, "1TiB": 1 << 20, "1PiB": 1 << 30, "1.5GiB": 1536} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, want := range map[uint64]string{1: "1M", 1024: "1G", 1536: "1536M", 1 << 20: "1T"} {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", in, got, want)
		}
	}
	for _, in := range []string{"", "G", "GB", "4iB", "4B", "4Gi", "4GiBB", "4BG", "4gb", "-4G", "4 G"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

// FuzzParseConstraints checks that the parser never panics, that whatever
// it accepts formats to text it accepts again, and that format∘parse is
// stable.
func FuzzParseConstraints(f *testing.F) {
	for _, s := range []string{"", "arch=amd64 cores=2 mem=4G", "zones=a,b spaces=db,^public", "mem=1.5T root-disk=0", "tags=^x,y instance-type=s1.small", "cores==", "=", "mem=1e9", "mem=4GB root-disk=1.5TiB", "mem=GiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseConstraints(s)
		if err != nil {
			if ErrorCode(err) != EInvalid {
				t.Fatalf("ParseConstraints(%q): code %q, want invalid", s, ErrorCode(err))
			}
			return
		}
		text := c.String()
		c2, err := ParseConstraints(text)
		if err != nil {
			t.Fatalf("ParseConstraints(%q) accepted, but its format %q is refused: %v", s, text, err)
		}
		if text2 := c2.String(); text2 != text {
			t.Fatalf("format∘parse not stable: %q → %q → %q", s, text, text2)
		}
	})
}

// FuzzParseSize checks that sizes never panic and that whatever is
// accepted is within bounds and formats to a size parsed back the same.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1", "4G", "4GB", "4GiB", "1.5T", "MiB", "1e9", "0x10", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSize(s)
		if err != nil {
			return
		}
		if v > maxSizeMiB {
			t.Fatalf("ParseSize(%q) = %d, above the bound", s, v)
		}
		if back, err := ParseSize(FormatSize(v)); v > 0 && (err != nil || back != v) {
			t.Fatalf("ParseSize(%q) = %d, but its format %q gives %d, %v", s, v, FormatSize(v), back, err)
		}
	})
}
