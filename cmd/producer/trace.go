package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/internal/cmdline"
	"github.com/shaper-dev/shaper/shaper/traffic"
)

func traceCommand() *cli.Command {
	return &cli.Command{
		Name:  "trace",
		Usage: "write a made-up trace: Poisson or even arrivals, bursts, a diurnal ramp, uniform or heavy-tailed keys",
		Description: "Writes a trace (CSV: at,key,size,outcome; see shaper tune and producer send --trace) of\n" +
			"--duration of traffic at --rate over --keys keys. The same flags and --seed make the same trace.",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "duration", Value: time.Minute, Usage: "how long the trace lasts, `D`"},
			&cli.StringFlag{Name: "rate", Value: "100/s", Usage: "mean submissions over all keys, `RATE` (N/s, N/m, …; 0 with bursts only)"},
			&cli.BoolFlag{Name: "even", Usage: "space arrivals evenly instead of at random (Poisson)"},
			&cli.IntFlag{Name: "keys", Value: 100, Usage: "number of keys `N`, named <key-prefix>0 … <key-prefix>N-1"},
			&cli.StringFlag{Name: "key-prefix", Value: "k", Usage: "`PREFIX` of the key names"},
			&cli.Float64Flag{Name: "zipf", Usage: "heavy-tailed keys: key i gets traffic ∝ 1/(i+1)^`S` (S > 1; 0 = uniform)"},
			&cli.DurationFlag{Name: "burst-every", Usage: "a burst starts every `D` (at 0, D, 2D, …)"},
			&cli.DurationFlag{Name: "burst-for", Usage: "each burst lasts `D`"},
			&cli.StringFlag{Name: "burst-rate", Usage: "submissions over all keys during a burst, `RATE`"},
			&cli.DurationFlag{Name: "diurnal-period", Usage: "the rate ramps up and down over `D`: rate·(1 − amplitude·cos(2πt/D))"},
			&cli.Float64Flag{Name: "diurnal-amplitude", Value: 0.5, Usage: "depth `A` of the ramp, 0 to 1"},
			&cli.IntFlag{Name: "size", Value: 64, Usage: "payload size in `BYTES`"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "random `SEED`"},
			&cli.StringFlag{Name: "out", Value: "-", Usage: "write to `FILE` (- for stdout)"},
		},
		Action: func(c *cli.Context) error {
			s, err := synthFrom(c)
			if err != nil {
				return cli.Exit("producer trace: "+err.Error(), cmdline.ExitUsage)
			}
			seq, err := s.Records()
			if err != nil {
				return fmt.Errorf("trace: %w", err)
			}
			var out io.Writer = c.App.Writer
			if path := c.String("out"); path != "-" {
				f, err := os.Create(path)
				if err != nil {
					return fmt.Errorf("trace: --out: %w", err)
				}
				defer f.Close()
				out = f
			}
			w := traffic.NewWriter(out, "made by producer trace: "+describeSynth(s))
			n := 0
			for r := range seq {
				if err := w.Write(r); err != nil {
					return fmt.Errorf("trace: %w", err)
				}
				n++
			}
			if err := w.Flush(); err != nil {
				return fmt.Errorf("trace: %w", err)
			}
			fmt.Fprintf(c.App.ErrWriter, "trace: %d submissions over %s\n", n, s.Duration)
			return nil
		},
	}
}

// synthFrom reads the flags of producer trace.
func synthFrom(c *cli.Context) (traffic.Synth, error) {
	s := traffic.Synth{
		Duration:  c.Duration("duration"),
		Even:      c.Bool("even"),
		Keys:      c.Int("keys"),
		KeyPrefix: c.String("key-prefix"),
		Zipf:      c.Float64("zipf"),
		Size:      c.Int("size"),
		Seed:      c.Uint64("seed"),
	}
	var err error
	if s.Rate, err = perSecond(c.String("rate")); err != nil {
		return s, fmt.Errorf("--rate: %w", err)
	}
	if c.IsSet("burst-every") || c.IsSet("burst-for") || c.IsSet("burst-rate") {
		s.Burst.Every, s.Burst.For = c.Duration("burst-every"), c.Duration("burst-for")
		if s.Burst.Rate, err = perSecond(c.String("burst-rate")); err != nil {
			return s, fmt.Errorf("--burst-rate: %w", err)
		}
		if s.Burst.Every <= 0 || s.Burst.For <= 0 || s.Burst.Rate <= 0 {
			return s, errors.New("a burst needs --burst-every, --burst-for and --burst-rate")
		}
	}
	if c.IsSet("diurnal-period") {
		s.Diurnal = traffic.Diurnal{Period: c.Duration("diurnal-period"), Amplitude: c.Float64("diurnal-amplitude")}
	}
	return s, synthFlagErrors(s, s.Validate())
}

// synthFlagErrors words Synth.Validate's errors by the flags that set the
// fields: `--keys 0: want at least 1`, not `traffic: synth: keys 0: …`.
func synthFlagErrors(s traffic.Synth, err error) error {
	if err == nil {
		return nil
	}
	flags := map[string]string{"duration": "--duration", "rate": "--rate", "keys": "--keys", "zipf": "--zipf", "size": "--size",
		"burst.rate": "--burst-rate", "diurnal.period": "--diurnal-period", "diurnal.amplitude": "--diurnal-amplitude"}
	// Validate joins one *SynthError per wrong field.
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		return err
	}
	var msgs []string
	for _, e := range joined.Unwrap() {
		var se *traffic.SynthError
		switch {
		case !errors.As(e, &se):
			msgs = append(msgs, e.Error())
		case se.Field == "burst":
			msgs = append(msgs, fmt.Sprintf("--burst-for %s, --burst-every %s: want a burst no longer than its period", s.Burst.For, s.Burst.Every))
		case flags[se.Field] != "":
			msgs = append(msgs, flags[se.Field]+" "+se.Msg)
		default:
			msgs = append(msgs, se.Error())
		}
	}
	return errors.New(strings.Join(msgs, "; "))
}

// perSecond parses a rate flag (see parseRate) into events per second.
func perSecond(s string) (float64, error) {
	r, err := parseRate(s)
	return r.PerSecond(), err
}

// describeSynth says in words what s makes, for the trace's comment.
func describeSynth(s traffic.Synth) string {
	arrivals := "Poisson"
	if s.Even {
		arrivals = "even"
	}
	d := fmt.Sprintf("%s arrivals at %s/s over %d keys", arrivals, strconv.FormatFloat(s.Rate, 'f', -1, 64), s.Keys)
	if s.Zipf > 0 {
		d += fmt.Sprintf(" (zipf %g)", s.Zipf)
	}
	if s.Burst.Every > 0 {
		d += fmt.Sprintf(", bursts of %g/s for %s every %s", s.Burst.Rate, s.Burst.For, s.Burst.Every)
	}
	if s.Diurnal.Period > 0 {
		d += fmt.Sprintf(", a ramp over %s (amplitude %g)", s.Diurnal.Period, s.Diurnal.Amplitude)
	}
	return d + fmt.Sprintf(", %d-byte payloads, seed %d, for %s", s.Size, s.Seed, s.Duration)
}
