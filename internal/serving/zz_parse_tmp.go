package serving

import "github.com/BurntSushi/toml"

func ParseConfig(data []byte, file string) (Config, error) {
	var c Config
	_, err := toml.Decode(string(data), &c)
	if c.Port == 0 { c.Port = 8080 }
	if c.Scale.Max == 0 { c.Scale.Max = 10 }
	if c.Scale.TargetConcurrency == 0 { c.Scale.TargetConcurrency = 10 }
	if c.Health.Interval.Duration == 0 { c.Health.Interval.Duration = 1e9 }
	if c.Health.Failures == 0 { c.Health.Failures = 3 }
	if c.Health.StartTimeout.Duration == 0 { c.Health.StartTimeout.Duration = 60e9 }
	if c.Scale.DrainTimeout.Duration == 0 { c.Scale.DrainTimeout.Duration = 30e9 }
	if c.Scale.IdleTimeout.Duration == 0 { c.Scale.IdleTimeout.Duration = 30e9 }
	if c.Scale.FreezeTimeout.Duration == 0 { c.Scale.FreezeTimeout.Duration = 600e9 }
	if c.Resources.Pids == 0 { c.Resources.Pids = 256 }
	return c, err
}
func (c Config) Hash() string { return c.Image }
