package ec2api

import "encoding/xml"

// The XML documents of the EC2 API, element for element as EC2 sends them
// (namespace namespace; lists are <xxxSet><item>…</item></xxxSet>).

const namespace = "http://ec2.amazonaws.com/doc/2016-11-15/"

type errorResponse struct {
	XMLName   xml.Name `xml:"Response"`
	Code      string   `xml:"Errors>Error>Code"`
	Message   string   `xml:"Errors>Error>Message"`
	RequestID string   `xml:"RequestID"`
}

type xmlEmpty struct{}

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xmlState struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

type xmlPlacement struct {
	AvailabilityZone string `xml:"availabilityZone"`
	Tenancy          string `xml:"tenancy"`
}

type xmlEBS struct {
	VolumeID            string `xml:"volumeId"`
	Status              string `xml:"status"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

type xmlBlockDevice struct {
	DeviceName string `xml:"deviceName"`
	EBS        xmlEBS `xml:"ebs"`
}

type xmlNICAttachment struct {
	DeviceIndex int `xml:"deviceIndex"`
}

type xmlNIC struct {
	NetworkInterfaceID string           `xml:"networkInterfaceId"`
	SubnetID           string           `xml:"subnetId"`
	VpcID              string           `xml:"vpcId"`
	PrivateIPAddress   string           `xml:"privateIpAddress"`
	Attachment         xmlNICAttachment `xml:"attachment"`
}

type xmlInstance struct {
	InstanceID         string           `xml:"instanceId"`
	ImageID            string           `xml:"imageId"`
	State              xmlState         `xml:"instanceState"`
	PrivateDNSName     string           `xml:"privateDnsName"`
	AmiLaunchIndex     int              `xml:"amiLaunchIndex"`
	InstanceType       string           `xml:"instanceType"`
	LaunchTime         string           `xml:"launchTime"`
	Placement          xmlPlacement     `xml:"placement"`
	SubnetID           string           `xml:"subnetId,omitempty"`
	VpcID              string           `xml:"vpcId,omitempty"`
	PrivateIP          string           `xml:"privateIpAddress,omitempty"`
	Architecture       string           `xml:"architecture"`
	RootDeviceType     string           `xml:"rootDeviceType"`
	RootDeviceName     string           `xml:"rootDeviceName"`
	BlockDevices       []xmlBlockDevice `xml:"blockDeviceMapping>item"`
	ClientToken        string           `xml:"clientToken,omitempty"`
	SourceDestCheck    bool             `xml:"sourceDestCheck"`
	EbsOptimized       bool             `xml:"ebsOptimized"`
	VirtualizationType string           `xml:"virtualizationType"`
	Hypervisor         string           `xml:"hypervisor"`
	Monitoring         struct {
		State string `xml:"state"`
	} `xml:"monitoring"`
	Tags []xmlTag `xml:"tagSet>item"`
	NICs []xmlNIC `xml:"networkInterfaceSet>item"`
}

type xmlReservation struct {
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	GroupSet      xmlEmpty      `xml:"groupSet"`
	Instances     []xmlInstance `xml:"instancesSet>item"`
}

type runInstancesResponse struct {
	XMLName   xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ RunInstancesResponse"`
	RequestID string   `xml:"requestId"`
	xmlReservation
}

type describeInstancesResponse struct {
	XMLName      xml.Name         `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeInstancesResponse"`
	RequestID    string           `xml:"requestId"`
	Reservations []xmlReservation `xml:"reservationSet>item"`
	NextToken    string           `xml:"nextToken,omitempty"`
}

type xmlStateChange struct {
	InstanceID    string   `xml:"instanceId"`
	CurrentState  xmlState `xml:"currentState"`
	PreviousState xmlState `xml:"previousState"`
}

type terminateInstancesResponse struct {
	XMLName   xml.Name         `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ TerminateInstancesResponse"`
	RequestID string           `xml:"requestId"`
	Instances []xmlStateChange `xml:"instancesSet>item"`
}

type xmlZone struct {
	ZoneName   string `xml:"zoneName"`
	ZoneState  string `xml:"zoneState"`
	RegionName string `xml:"regionName"`
	ZoneID     string `xml:"zoneId"`
	ZoneType   string `xml:"zoneType"`
}

type describeAvailabilityZonesResponse struct {
	XMLName   xml.Name  `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeAvailabilityZonesResponse"`
	RequestID string    `xml:"requestId"`
	Zones     []xmlZone `xml:"availabilityZoneInfo>item"`
}

type xmlSubnet struct {
	SubnetID                string   `xml:"subnetId"`
	VpcID                   string   `xml:"vpcId"`
	CIDRBlock               string   `xml:"cidrBlock"`
	AvailabilityZone        string   `xml:"availabilityZone"`
	State                   string   `xml:"state"`
	AvailableIPAddressCount int      `xml:"availableIpAddressCount"`
	DefaultForAz            bool     `xml:"defaultForAz"`
	Tags                    []xmlTag `xml:"tagSet>item"`
}

type describeSubnetsResponse struct {
	XMLName   xml.Name    `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeSubnetsResponse"`
	RequestID string      `xml:"requestId"`
	Subnets   []xmlSubnet `xml:"subnetSet>item"`
	NextToken string      `xml:"nextToken,omitempty"`
}

// xmlImage: EC2 names the owner element imageOwnerId (Image.OwnerId in
// the SDK).
type xmlImage struct {
	ImageID            string `xml:"imageId"`
	Name               string `xml:"name"`
	OwnerID            string `xml:"imageOwnerId"`
	ImageState         string `xml:"imageState"`
	Architecture       string `xml:"architecture"`
	CreationDate       string `xml:"creationDate"`
	IsPublic           bool   `xml:"isPublic"`
	ImageType          string `xml:"imageType"`
	RootDeviceName     string `xml:"rootDeviceName"`
	RootDeviceType     string `xml:"rootDeviceType"`
	VirtualizationType string `xml:"virtualizationType"`
}

type describeImagesResponse struct {
	XMLName   xml.Name   `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeImagesResponse"`
	RequestID string     `xml:"requestId"`
	Images    []xmlImage `xml:"imagesSet>item"`
	NextToken string     `xml:"nextToken,omitempty"`
}

type xmlInstanceType struct {
	InstanceType      string `xml:"instanceType"`
	CurrentGeneration bool   `xml:"currentGeneration"`
	VCPUInfo          struct {
		DefaultVCPUs int `xml:"defaultVCpus"`
	} `xml:"vCpuInfo"`
	MemoryInfo struct {
		SizeInMiB uint64 `xml:"sizeInMiB"`
	} `xml:"memoryInfo"`
	ProcessorInfo struct {
		SupportedArchitectures []string `xml:"supportedArchitectures>item"`
	} `xml:"processorInfo"`
}

type describeInstanceTypesResponse struct {
	XMLName   xml.Name          `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeInstanceTypesResponse"`
	RequestID string            `xml:"requestId"`
	Types     []xmlInstanceType `xml:"instanceTypeSet>item"`
	NextToken string            `xml:"nextToken,omitempty"`
}

type describeInstanceAttributeResponse struct {
	XMLName    xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeInstanceAttributeResponse"`
	RequestID  string   `xml:"requestId"`
	InstanceID string   `xml:"instanceId"`
	// Attr is the one attribute asked for: its XMLName is the
	// attribute's name.
	Attr xmlNamedValue
}

type xmlNamedValue struct {
	XMLName xml.Name
	Value   string `xml:"value,omitempty"`
}

type stopInstancesResponse struct {
	XMLName   xml.Name         `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ StopInstancesResponse"`
	RequestID string           `xml:"requestId"`
	Instances []xmlStateChange `xml:"instancesSet>item"`
}

type startInstancesResponse struct {
	XMLName   xml.Name         `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ StartInstancesResponse"`
	RequestID string           `xml:"requestId"`
	Instances []xmlStateChange `xml:"instancesSet>item"`
}

type createTagsResponse struct {
	XMLName   xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ CreateTagsResponse"`
	RequestID string   `xml:"requestId"`
	Return    bool     `xml:"return"`
}

type deleteTagsResponse struct {
	XMLName   xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DeleteTagsResponse"`
	RequestID string   `xml:"requestId"`
	Return    bool     `xml:"return"`
}

type xmlResourceTag struct {
	ResourceID   string `xml:"resourceId"`
	ResourceType string `xml:"resourceType"`
	Key          string `xml:"key"`
	Value        string `xml:"value"`
}

type describeTagsResponse struct {
	XMLName   xml.Name         `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeTagsResponse"`
	RequestID string           `xml:"requestId"`
	Tags      []xmlResourceTag `xml:"tagSet>item"`
	NextToken string           `xml:"nextToken,omitempty"`
}

type xmlStatusDetail struct {
	Name   string `xml:"name"`
	Status string `xml:"status"`
}

type xmlStatus struct {
	Status  string            `xml:"status"`
	Details []xmlStatusDetail `xml:"details>item"`
}

type xmlInstanceStatus struct {
	InstanceID       string    `xml:"instanceId"`
	AvailabilityZone string    `xml:"availabilityZone"`
	State            xmlState  `xml:"instanceState"`
	SystemStatus     xmlStatus `xml:"systemStatus"`
	InstanceStatus   xmlStatus `xml:"instanceStatus"`
}

type describeInstanceStatusResponse struct {
	XMLName   xml.Name            `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeInstanceStatusResponse"`
	RequestID string              `xml:"requestId"`
	Statuses  []xmlInstanceStatus `xml:"instanceStatusSet>item"`
	NextToken string              `xml:"nextToken,omitempty"`
}

type xmlVpc struct {
	VpcID           string   `xml:"vpcId"`
	OwnerID         string   `xml:"ownerId"`
	State           string   `xml:"state"`
	CIDRBlock       string   `xml:"cidrBlock"`
	DhcpOptionsID   string   `xml:"dhcpOptionsId"`
	InstanceTenancy string   `xml:"instanceTenancy"`
	IsDefault       bool     `xml:"isDefault"`
	Tags            []xmlTag `xml:"tagSet>item"`
}

type describeVpcsResponse struct {
	XMLName   xml.Name `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeVpcsResponse"`
	RequestID string   `xml:"requestId"`
	Vpcs      []xmlVpc `xml:"vpcSet>item"`
	NextToken string   `xml:"nextToken,omitempty"`
}

type xmlRegion struct {
	RegionName     string `xml:"regionName"`
	RegionEndpoint string `xml:"regionEndpoint"`
	OptInStatus    string `xml:"optInStatus"`
}

type describeRegionsResponse struct {
	XMLName   xml.Name    `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeRegionsResponse"`
	RequestID string      `xml:"requestId"`
	Regions   []xmlRegion `xml:"regionInfo>item"`
}

type xmlVolumeAttachment struct {
	VolumeID            string `xml:"volumeId"`
	InstanceID          string `xml:"instanceId"`
	Device              string `xml:"device"`
	Status              string `xml:"status"`
	AttachTime          string `xml:"attachTime"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

type xmlVolume struct {
	VolumeID         string                `xml:"volumeId"`
	Size             uint64                `xml:"size"`
	AvailabilityZone string                `xml:"availabilityZone"`
	Status           string                `xml:"status"`
	CreateTime       string                `xml:"createTime"`
	VolumeType       string                `xml:"volumeType"`
	Encrypted        bool                  `xml:"encrypted"`
	Attachments      []xmlVolumeAttachment `xml:"attachmentSet>item"`
	Tags             []xmlTag              `xml:"tagSet>item"`
}

type describeVolumesResponse struct {
	XMLName   xml.Name    `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeVolumesResponse"`
	RequestID string      `xml:"requestId"`
	Volumes   []xmlVolume `xml:"volumeSet>item"`
	NextToken string      `xml:"nextToken,omitempty"`
}
